"""Hostile: a Pallas kernel whose loop never ends (spins inside the interpreter's XLA thread)."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def workload(x, scale):
    def body(x_ref, s_ref, o_ref):
        def cond(c):
            return c[0] >= 0

        def step(c):
            return (c[0] + 1, c[1] * 1.0000001)

        _, acc = jax.lax.while_loop(cond, step, (jnp.int32(0), x_ref[...].astype(jnp.float32)))
        o_ref[...] = acc.astype(o_ref.dtype)

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, scale)
