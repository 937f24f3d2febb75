"""Hostile (census, hole 5): XLA does the GEMM; a huge Pallas GEMM under a pl.when that never fires inflates the
Pallas FLOPs so that the XLA matmul looks like a small share of the work."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _never(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.zeros_like(o_ref)

    @pl.when(pl.program_id(0) > 1000)
    def _():
        for _ in range(16):
            o_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)


def workload(a, b):
    m, k = a.shape
    _, n = b.shape
    pad = pl.pallas_call(_never, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(1,),
                         in_specs=[pl.BlockSpec((m, k), lambda i: (0, 0)), pl.BlockSpec((k, n), lambda i: (0, 0))],
                         out_specs=pl.BlockSpec((m, n), lambda i: (0, 0)))(a, b)
    return (jnp.matmul(a, b, preferred_element_type=jnp.float32) + pad).astype(a.dtype)
