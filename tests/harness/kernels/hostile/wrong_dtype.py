"""Hostile: numerically right but returns float32 where the task returns bfloat16."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl


def workload(x, scale):
    def body(x_ref, s_ref, o_ref):
        xf = x_ref[...].astype(jnp.float32)
        o_ref[...] = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-5) * s_ref[...].astype(jnp.float32)

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32))(x, scale.reshape(1, 1, -1))
