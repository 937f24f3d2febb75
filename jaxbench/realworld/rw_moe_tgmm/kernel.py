"""Pallas TPU kernel for rw_moe_tgmm: dW[e] = lhs[rows of e]^T @ grad[rows of e], one pass over the expert-sorted
rows, each expert's [K, N] block accumulated in f32 VMEM and written once.

The work is a list of items, one per (row tile, expert) pair whose rows overlap, in expert order (an expert with no
rows gets one empty item, so its block is written as zeros). The items' expert, row tile and row range are
scalar-prefetched into SMEM: each grid step fetches its item's row tiles of lhs and grad, masks grad's rows outside
the expert, and adds lhs^T @ grad into the accumulator; the output block follows the expert, so Pallas writes each
expert's block back once, when the expert changes. XLA's reference gathers every item's tiles and writes an f32
[items, K, N] partial product to HBM before summing it per expert; here nothing but dW leaves VMEM.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Candidate values per tunable, for the autotuner. Rows per item: a tile that straddles two experts is done once
# for each, so a longer tile does more masked work (T / tile_rows + E items); a shorter one feeds the MXU a shorter
# contraction. block_k and block_n tile dW's [K, N] (default: whole, so lhs and grad are read once).
TUNABLES = {
    "tile_rows": (128, 256, 512),
    "block_k": (256, 512, 1024, 2048),
    "block_n": (256, 512, 768, 2048),
}

SUBLANES, LANES = 8, 128


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Rows per work item and the tiles of dW's [K, N]; build with `fit` so they are clamped and checked."""

    tile_rows: int
    block_k: int
    block_n: int

    def __post_init__(self):
        for name, value in dataclasses.asdict(self).items():
            if value <= 0:
                raise ValueError(f"{name}={value} must be positive")

    @classmethod
    def fit(cls, rows: int, k: int, n: int, *, tile_rows: int, block_k: int, block_n: int) -> "BlockSizes":
        """Clamped to the array dims (one setting serves smoke, wi and wo), then checked."""
        sizes = cls(math.gcd(rows, tile_rows), min(block_k, k), min(block_n, n))
        for dim, extent, block, align in (("rows", rows, sizes.tile_rows, SUBLANES),
                                          ("K", k, sizes.block_k, LANES),
                                          ("N", n, sizes.block_n, LANES)):
            if extent % block:
                raise ValueError(f"block for {dim}={extent} is {block}, which does not divide it")
            if block != extent and block % align:
                raise ValueError(f"block for {dim}={extent} is {block}: must be a multiple of {align} or all of {dim}")
        return sizes


def _work_items(group_sizes: jax.Array, rows: int, tm: int) -> tuple[jax.Array, ...]:
    """Per item (static count tiles + experts): its expert, its row tile, and the half-open row range it adds.
    Items past the last real one repeat the last expert and tile with an empty range: they add nothing and fetch
    nothing new."""
    groups = group_sizes.shape[0]
    tiles = rows // tm
    items = tiles + groups
    ends = jnp.cumsum(group_sizes)
    starts = ends - group_sizes
    first_tile = jnp.minimum(starts // tm, tiles - 1)
    count = jnp.where(group_sizes > 0, (ends - 1) // tm - starts // tm + 1, 1)  # an empty expert: one empty item
    item_end = jnp.cumsum(count)
    i = jnp.arange(items, dtype=jnp.int32)
    group = jnp.searchsorted(item_end, i, side="right").astype(jnp.int32)
    real = group < groups
    group = jnp.minimum(group, groups - 1)
    last_tile = first_tile[groups - 1] + count[groups - 1] - 1
    tile = jnp.where(real, first_tile[group] + i - (item_end - count)[group], last_tile).astype(jnp.int32)
    lo = jnp.where(real, starts[group], 0).astype(jnp.int32)
    hi = jnp.where(real, ends[group], 0).astype(jnp.int32)
    return group, tile, lo, hi


def _tgmm_kernel(group_ref, tile_ref, lo_ref, hi_ref, lhs_ref, grad_ref, out_ref, acc_ref):
    # SMEM: group_ref / tile_ref / lo_ref / hi_ref [items] int32. lhs_ref: [tm, bk], grad_ref: [tm, bn],
    # out_ref: [1, bk, bn] (the item's expert), acc_ref: [bk, bn] f32
    i, last = pl.program_id(2), pl.num_programs(2) - 1
    g = group_ref[i]

    @pl.when((i == 0) | (group_ref[jnp.maximum(i - 1, 0)] != g))
    def _first_of_expert():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    tm = grad_ref.shape[0]
    row = tile_ref[i] * tm + lax.broadcasted_iota(jnp.int32, grad_ref.shape, 0)
    grad = jnp.where((row >= lo_ref[i]) & (row < hi_ref[i]), grad_ref[...], jnp.zeros((), grad_ref.dtype))
    acc_ref[...] += lax.dot_general(lhs_ref[...], grad, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)

    @pl.when((i == last) | (group_ref[jnp.minimum(i + 1, last)] != g))
    def _last_of_expert():
        out_ref[0] = acc_ref[...].astype(out_ref.dtype)


def _vmem_limit(bs: BlockSizes, size: int) -> int:
    """Double-buffered row tiles and output block, the f32 accumulator and the product's temporary, a quarter more
    for Mosaic's scratch; never below the 16 MiB default, never above 100 MiB (v5e and v6e have 128)."""
    need = 2 * size * bs.tile_rows * (bs.block_k + bs.block_n) + (2 * size + 8) * bs.block_k * bs.block_n
    return int(min(max(need * 5 // 4, 16 << 20), 100 << 20))


@functools.partial(jax.jit, static_argnames=("tile_rows", "block_k", "block_n"))
def workload(
    lhs: jax.Array,  # [T, K] rows sorted by expert
    grad: jax.Array,  # [T, N] rows sorted by expert
    group_sizes: jax.Array,  # [E] int32, summing to T
    *,
    tile_rows: int = 128,
    block_k: int = 2048,
    block_n: int = 2048,
) -> jax.Array:  # [E, K, N] in lhs's dtype
    """dW[e] = lhs[rows of e]^T @ grad[rows of e] in f32, zeros for an expert with no rows."""
    (rows, k), (rows_g, n) = lhs.shape, grad.shape
    if rows != rows_g:
        raise ValueError(f"lhs has {rows} rows and grad {rows_g}: both are the T expert-sorted rows")
    groups = group_sizes.shape[0]
    bs = BlockSizes.fit(rows, k, n, tile_rows=tile_rows, block_k=block_k, block_n=block_n)
    tm = bs.tile_rows
    items = rows // tm + groups
    meta = _work_items(group_sizes.astype(jnp.int32), rows, tm)
    size = lhs.dtype.itemsize
    grid = (k // bs.block_k, n // bs.block_n, items)
    cost = pl.CostEstimate(flops=2 * items * tm * k * n, transcendentals=0,
                           bytes_accessed=size * (items * tm * (k * grid[1] + n * grid[0]) + groups * k * n))
    return pl.pallas_call(
        _tgmm_kernel,
        out_shape=jax.ShapeDtypeStruct((groups, k, n), lhs.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=grid,
            in_specs=[
                pl.BlockSpec((tm, bs.block_k), lambda kk, nn, i, grp, tile, lo, hi: (tile[i], kk)),
                pl.BlockSpec((tm, bs.block_n), lambda kk, nn, i, grp, tile, lo, hi: (tile[i], nn)),
            ],
            out_specs=pl.BlockSpec((1, bs.block_k, bs.block_n), lambda kk, nn, i, grp, tile, lo, hi: (grp[i], kk, nn)),
            scratch_shapes=[pltpu.VMEM((bs.block_k, bs.block_n), jnp.float32)],
        ),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=_vmem_limit(bs, size)),
        cost_estimate=cost,
    )(*meta, lhs, grad)
