"""Reference Pallas TPU kernel for 50k_Matmul_GELU_Softmax: fused linear + GELU with online softmax stats, then normalise."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# The softmax runs over all out_features (8192 at full size). Holding a whole row block in VMEM would cap
# block_m near 128 (an f32 [128, 8192] row block alone is 4 MiB) and re-read w 32 times; instead pass 1
# tiles N like a GEMM, writes the f32 GELU outputs and keeps a running row max and sum of exponentials
# (online softmax) across the N axis, and pass 2 rescales. The extra HBM round trip of the f32
# logits (~0.4 GB at full size) costs less than the w re-reads it saves.
# Defaults by `maxkernel estimate --set` at full size: 512 x 1024 x 2048 (each call asks for a scoped VMEM limit
# sized from its blocks) is 3.48 ms on v5e and 1.19 ms on v6e against XLA's 2.96 / 0.616, where the first defaults
# 512 x 512 x 1024 were 3.61 / 1.52: x and w are re-read half as often. The kernel stays memory-bound on v6e (w is
# still read 8 times); block_m 1024 would halve that, but the estimator cannot price it yet (one tile is past its
# profiling budget, a known gap of the estimator).
TUNABLES = {
    "block_m": (128, 256, 512, 1024),
    "block_n": (128, 256, 512, 1024),
    "block_k": (128, 256, 512, 1024, 2048),
}

SUBLANES, LANES = 8, 128
_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # x[bm, bk] . w[bn, bk]: w stays in torch Linear layout
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes over batch (M), out_features (N) and in_features (K); pass 2 reuses block_m x block_n."""

    block_m: int
    block_n: int
    block_k: int

    def __post_init__(self):
        for name, value in dataclasses.asdict(self).items():
            if value <= 0:
                raise ValueError(f"{name}={value} must be positive")

    @classmethod
    def fit(cls, m: int, n: int, k: int, *, block_m: int, block_n: int, block_k: int) -> "BlockSizes":
        """Blocks clamped to the array dims (so one setting serves smoke and full size), then validated."""
        sizes = cls(min(block_m, m), min(block_n, n), min(block_k, k))
        for dim, extent, block, align in (("batch_size", m, sizes.block_m, SUBLANES),
                                          ("out_features", n, sizes.block_n, LANES),
                                          ("in_features", k, sizes.block_k, LANES)):
            if extent % block:
                raise ValueError(f"block for {dim}={extent} is {block}, which does not divide it")
            if block != extent and block % align:
                raise ValueError(f"block for {dim}={extent} is {block}: must be a multiple of {align} or all of it")
        return sizes


def _gelu_stats_kernel(x_ref, w_ref, b_ref, g_ref, m_ref, l_ref, acc_ref):
    # x_ref: [bm, bk], w_ref: [bn, bk], b_ref: [1, bn], g_ref / acc_ref: [bm, bn], m_ref / l_ref: [bm, 1]
    # m_ref and l_ref keep the same block index along the N and K axes, so they stay resident in VMEM
    # and serve as the running row max and running sum of exp(g - max).
    j, k = pl.program_id(1), pl.program_id(2)

    @pl.when((j == 0) & (k == 0))
    def _init_stats():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)

    @pl.when(k == 0)
    def _init_acc():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += lax.dot_general(x_ref[...], w_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _epilogue():
        z = acc_ref[...] + b_ref[...].astype(jnp.float32)
        g = 0.5 * z * (1.0 + lax.erf(z * _INV_SQRT2))  # exact GELU, as torch's default
        g_ref[...] = g
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(g, axis=-1, keepdims=True))
        # On the first N block m_prev is -inf, so the old sum (0) is scaled by exp(-inf) = 0.
        l_ref[...] = l_ref[...] * jnp.exp(m_prev - m_new) + jnp.sum(jnp.exp(g - m_new), axis=-1, keepdims=True)
        m_ref[...] = m_new


def _vmem_limit(*block_bytes: int) -> int:
    """Scoped VMEM for a call whose pipelined blocks and scratch take `block_bytes` (each counted as given: pass
    double-buffered blocks twice), with a quarter more for Mosaic's own scratch; never below the 16 MiB default,
    never above 100 MiB (v5e and v6e have 128)."""
    return int(min(max(sum(block_bytes) * 5 // 4, 16 << 20), 100 << 20))


def _normalize_kernel(g_ref, m_ref, l_ref, o_ref):
    # g_ref: [bm, bn] f32, m_ref / l_ref: [bm, 1] f32 (final row stats), o_ref: [bm, bn]
    o_ref[...] = (jnp.exp(g_ref[...] - m_ref[...]) / l_ref[...]).astype(o_ref.dtype)


def gelu_logits_and_stats(x, w, b, bs: BlockSizes):
    """Pass 1: g = gelu(x @ w.T + b) in f32 [M, N], with each row's max m [M, 1] and sum(exp(g - m)) l [M, 1]."""
    (m, k), n = x.shape, w.shape[0]
    grid = (m // bs.block_m, n // bs.block_n, k // bs.block_k)
    size = jnp.dtype(x.dtype).itemsize
    cost = pl.CostEstimate(
        flops=2 * m * n * k + 16 * m * n,
        transcendentals=2 * m * n,  # erf and exp per element
        bytes_accessed=size * (m * k * grid[1] + n * k * grid[0] + n) + 4 * (m * n + 2 * m),
    )
    stats = jax.ShapeDtypeStruct((m, 1), jnp.float32)
    return pl.pallas_call(
        _gelu_stats_kernel,
        out_shape=(jax.ShapeDtypeStruct((m, n), jnp.float32), stats, stats),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bs.block_n, bs.block_k), lambda i, j, kk: (j, kk)),
            pl.BlockSpec((1, bs.block_n), lambda i, j, kk: (0, j)),
        ],
        out_specs=(
            pl.BlockSpec((bs.block_m, bs.block_n), lambda i, j, kk: (i, j)),
            pl.BlockSpec((bs.block_m, 1), lambda i, j, kk: (i, 0)),
            pl.BlockSpec((bs.block_m, 1), lambda i, j, kk: (i, 0)),
        ),
        scratch_shapes=[pltpu.VMEM((bs.block_m, bs.block_n), jnp.float32)],
        # N carries the running stats, so only the row axis is parallel.
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary"),
            vmem_limit_bytes=_vmem_limit(2 * size * bs.block_m * bs.block_k, 2 * size * bs.block_n * bs.block_k,
                                         2 * 4 * bs.block_m * bs.block_n, 4 * bs.block_m * bs.block_n)),
        cost_estimate=cost,
        interpret=False,
    )(x, w, b.reshape(1, n))


def normalize(g, row_max, row_sum, out_dtype, bs: BlockSizes):
    """Pass 2: exp(g - m) / l per row, in out_dtype."""
    m, n = g.shape
    cost = pl.CostEstimate(flops=2 * m * n, transcendentals=m * n,
                           bytes_accessed=4 * (m * n + 2 * m) + jnp.dtype(out_dtype).itemsize * m * n)
    return pl.pallas_call(
        _normalize_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
        grid=(m // bs.block_m, n // bs.block_n),
        in_specs=[
            pl.BlockSpec((bs.block_m, bs.block_n), lambda i, j: (i, j)),
            pl.BlockSpec((bs.block_m, 1), lambda i, j: (i, 0)),
            pl.BlockSpec((bs.block_m, 1), lambda i, j: (i, 0)),
        ],
        out_specs=pl.BlockSpec((bs.block_m, bs.block_n), lambda i, j: (i, j)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel"),
            vmem_limit_bytes=_vmem_limit(2 * 4 * bs.block_m * bs.block_n,
                                         2 * jnp.dtype(out_dtype).itemsize * bs.block_m * bs.block_n)),
        cost_estimate=cost,
        interpret=False,
    )(g, row_max, row_sum)


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k"))
def workload(
    x: jax.Array,  # [batch_size, in_features]
    w: jax.Array,  # [out_features, in_features]
    b: jax.Array,  # [out_features]
    *,
    block_m: int = 512,
    block_n: int = 1024,
    block_k: int = 2048,
) -> jax.Array:  # [batch_size, out_features] in x's dtype
    """softmax(gelu(x @ w.T + b), axis=-1): both passes are Pallas kernels, all arithmetic in f32."""
    (m, k), (n, k_w) = x.shape, w.shape
    if k != k_w:
        raise ValueError(f"in_features differ: x is [batch_size={m}, in_features={k}], w is [{n}, in_features={k_w}]")
    if b.shape != (n,):
        raise ValueError(f"b has shape {b.shape}, expected (out_features={n},)")
    bs = BlockSizes.fit(m, n, k, block_m=block_m, block_n=block_n, block_k=block_k)
    g, row_max, row_sum = gelu_logits_and_stats(x, w, b, bs)
    return normalize(g, row_max, row_sum, x.dtype, bs)
