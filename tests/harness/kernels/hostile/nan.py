"""Hostile: correct except for one NaN in the output."""

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
import jax


def workload(x, scale):
    def body(x_ref, s_ref, o_ref):
        xf = x_ref[...].astype(jnp.float32)
        y = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-5)
        y = y.astype(o_ref.dtype) * s_ref[...]
        idx = lax.broadcasted_iota(jnp.int32, y.shape, 2)
        o_ref[...] = jnp.where(idx == 3, jnp.nan, y).astype(o_ref.dtype)

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, scale.reshape(1, 1, -1))
