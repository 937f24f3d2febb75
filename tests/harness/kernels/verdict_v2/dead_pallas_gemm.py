"""Hostile (hole 9): XLA computes RMSNorm; a full Pallas GEMM whose result is thrown away supplies the 'Pallas
share' (the TPU compiler removes it; the old census counted it)."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl


def _gemm(a_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], a_ref[...].T, preferred_element_type=jnp.float32)


def workload(x, scale):
    b, s, d = x.shape
    flat = x.reshape(b * s, d)
    pl.pallas_call(_gemm, out_shape=jax.ShapeDtypeStruct((b * s, b * s), jnp.float32))(flat)  # thrown away
    xf = x.astype(jnp.float32)
    ms = jnp.mean(lax.square(xf), axis=-1, keepdims=True)
    return (xf * lax.rsqrt(ms + 1e-5)).astype(x.dtype) * scale
