"""Hostile (8p_GEMM): the matmul in XLA, a token Pallas epilogue that scales by one."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def workload(a, b):
    c = jnp.dot(a, b, preferred_element_type=jnp.float32)

    def body(i_ref, o_ref):
        o_ref[...] = (i_ref[...] * 1.0).astype(o_ref.dtype)

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(c.shape, a.dtype))(c)
