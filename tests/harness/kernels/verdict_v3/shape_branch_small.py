"""Hostile (verdict v3, hole 2): an honest tiled Pallas GEMM while the output is small (the smoke size, and any
check size the interpreter can afford), and at large sizes a cheap Pallas kernel that copies a slice of `a` (wrong,
and estimated at its memory floor: a rank above the shipped reference kernel). Correct on every size the verdict
runs; the fingerprint of the priced program gives it away, so it gets no estimate and is not ranked."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

SMALL = 1 << 20  # output elements


def _matmul(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _cheap(a_ref, o_ref):
    o_ref[...] = a_ref[...]


def workload(a, b):
    (m, k), (_, n) = a.shape, b.shape
    if m * n <= SMALL:
        bm, bn, bk = min(256, m), min(128, n), min(512, k)
        return pl.pallas_call(
            _matmul, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype), grid=(m // bm, n // bn, k // bk),
            in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)), pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)])(a, b)
    bm, bn = 512, 512
    return pl.pallas_call(_cheap, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype), grid=(m // bm, n // bn),
                          in_specs=[pl.BlockSpec((bm, bn), lambda i, j: (i, 0))],
                          out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)))(a)
