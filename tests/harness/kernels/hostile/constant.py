"""Hostile: writes a constant (the typical magnitude of an RMS-normalised value) from a Pallas kernel."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def workload(x, scale):
    def body(x_ref, s_ref, o_ref):
        o_ref[...] = jnp.full(o_ref.shape, 0.8, o_ref.dtype) * s_ref[...]

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, scale.reshape(1, 1, -1))
