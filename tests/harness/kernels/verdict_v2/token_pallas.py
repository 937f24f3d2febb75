"""Hostile (hole 9): XLA computes RMSNorm; a live but pointless Pallas GEMM (its result times zero is added to the
output) is there only to clear the Pallas share floor."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl


def _gemm(a_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], a_ref[...].T, preferred_element_type=jnp.float32)


def workload(x, scale):
    b, s, d = x.shape
    flat = x.reshape(b * s, d)
    g = pl.pallas_call(_gemm, out_shape=jax.ShapeDtypeStruct((b * s, b * s), jnp.float32))(flat)
    xf = x.astype(jnp.float32)
    ms = jnp.mean(lax.square(xf), axis=-1, keepdims=True)
    out = (xf * lax.rsqrt(ms + 1e-5)).astype(x.dtype) * scale
    return out + (0.0 * g[0, 0]).astype(x.dtype)
