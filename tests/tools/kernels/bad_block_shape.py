"""Broken on purpose (8p_GEMM): a 100-row block breaks the (8, 128) tiling rule; lowering must refuse it."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


def workload(a, b):
    (m, k), n = a.shape, b.shape[1]
    bm, bn = 100, 128  # 100 is neither a multiple of 8 nor M
    return pl.pallas_call(
        _kernel,
        grid=(pl.cdiv(m, bm), n // bn),
        in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)), pl.BlockSpec((k, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
    )(a, b)
