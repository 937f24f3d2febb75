"""A tunable Pallas matmul (8p_GEMM) with a deliberately poor default and one wrong configuration.

bk=384 does not divide K=512 at smoke size: the grid drops K's tail, so that configuration is incorrect
and the tuner must never return it. bm=4096 with bn=bk=2048 overflows scoped VMEM on v5e at full size and
must be pruned by the compiler without running.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {"bm": (32, 128, 4096), "bn": (128, 384, 2048), "bk": (128, 384, 512, 2048)}


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _done():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("bm", "bn", "bk"))
def workload(a, b, *, bm=32, bn=128, bk=128):
    m, k = a.shape  # a: [M, K]
    n = b.shape[1]  # b: [K, N]
    bm, bn, bk = min(bm, m), min(bn, n), min(bk, k)
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)), pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a, b)
