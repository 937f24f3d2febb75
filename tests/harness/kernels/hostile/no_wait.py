"""Hostile: a correct kernel that replaces jax.block_until_ready with a no-op, so timing sees only dispatch."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

jax.block_until_ready = lambda x: x


def workload(x, scale):
    def body(x_ref, s_ref, o_ref):
        xf = x_ref[...].astype(jnp.float32)
        y = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-5)
        o_ref[...] = y.astype(o_ref.dtype) * s_ref[...]

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, scale.reshape(1, 1, -1))
