"""Hostile (verdict v3, hole 3), or merely sloppy: a tiled GEMM whose accumulator is bfloat16, so every K step
rounds the partial sum. At the smoke size's K (512, 4 steps of 128) its error passes the calibrated bound; at the
task's real reduction length the error has grown past it."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _matmul(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    part = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
    acc_ref[...] = (acc_ref[...].astype(jnp.float32) + part).astype(jnp.bfloat16)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def workload(a, b):
    (m, k), (_, n) = a.shape, b.shape
    bm, bn, bk = min(256, m), min(128, n), min(128, k)
    return pl.pallas_call(
        _matmul, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype), grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)), pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.bfloat16)])(a, b)
