"""Pallas TPU kernel for 14p_Ragged_Dot: a grouped matmul over row-ragged groups (lax.ragged_dot semantics).

The rows of lhs are split into consecutive groups by `group_sizes`; group g's rows meet rhs[g]. The row axis is cut
into block_m tiles, and a small schedule of (row tile, group) work items is built from the group offsets: one item
per tile a non-empty group touches, in row order, so a tile that straddles a group boundary gets one item per group
in it. The schedule (tile id, group id per item, the group offsets and the item count) is scalar-prefetched, so each
grid step's index maps fetch that tile's lhs rows and that group's rhs block. The whole contraction dim is in one
block: consecutive items of the same group keep the same rhs block (no new DMA), consecutive items of the same tile
keep the same lhs and output blocks. Each item writes only the rows of its group into the resident output tile; the
other rows are written by the neighbouring items of the same tile. Items past the schedule's end repeat the last
item's blocks (no DMA) and compute nothing.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# block_m: rows per tile (a straddling tile is computed once per group in it, so smaller tiles waste fewer FLOPs
# but re-read rhs blocks more often); block_n: output columns per tile (the rhs block is [K, block_n]).
TUNABLES = {
    "block_m": (128, 256, 512),
    "block_n": (512, 1024, 2048),
}

SUBLANES, LANES = 8, 128


def _fit(extent: int, block: int, align: int, name: str) -> int:
    """The largest multiple of `align` no larger than `block` that divides `extent`, else all of `extent`."""
    if block <= 0:
        raise ValueError(f"{name}={block} must be positive")
    if block >= extent:
        return extent
    for cand in range(block - block % align, 0, -align):
        if extent % cand == 0:
            return cand
    return extent


def _schedule(group_sizes: jax.Array, m: int, block_m: int):
    """(tile id, group id) per work item, padded to the static bound num_tiles + num_groups - 1, and the count."""
    num_groups = group_sizes.shape[0]
    num_tiles = m // block_m
    num_items = num_tiles + num_groups - 1
    sizes = group_sizes.astype(jnp.int32)
    ends = lax.cumsum(sizes, axis=0)
    starts = ends - sizes
    first_tile = lax.div(starts, block_m)
    last_tile = lax.div(jnp.maximum(ends - 1, 0), block_m)
    counts = jnp.where(sizes > 0, last_tile - first_tile + 1, 0)
    cum = lax.cumsum(counts, axis=0)
    total = cum[-1]
    w = jnp.arange(num_items, dtype=jnp.int32)
    # Item w belongs to the first group whose cumulative count exceeds w; items past the end repeat the last one.
    w_clamped = jnp.minimum(w, total - 1)
    gid = jnp.sum((w_clamped[:, None] >= cum[None, :]).astype(jnp.int32), axis=1)
    gid = jnp.minimum(gid, num_groups - 1)
    # Its tile is the group's first tile plus its rank among the group's items. The per-group values are picked by
    # a one-hot select, not a gather: libtpu's static profiler (the estimator) aborts on XLA's gather DMA.
    base = first_tile - (cum - counts)
    onehot = gid[:, None] == jnp.arange(num_groups, dtype=jnp.int32)[None, :]
    tid = jnp.sum(jnp.where(onehot, base[None, :], 0), axis=1) + w_clamped
    tid = jnp.clip(tid, 0, num_tiles - 1)
    return tid.astype(jnp.int32), gid.astype(jnp.int32), starts, ends, total.reshape(1).astype(jnp.int32)


def _gmm_kernel(tid_ref, gid_ref, start_ref, end_ref, total_ref, lhs_ref, rhs_ref, o_ref, *, block_m):
    # lhs_ref: [block_m, K], rhs_ref: [K, block_n], o_ref: [block_m, block_n]
    w = pl.program_id(1)

    @pl.when(w < total_ref[0])
    def _compute():
        t, g = tid_ref[w], gid_ref[w]
        lo, hi = start_ref[g], end_ref[g]
        row0 = t * block_m
        res = jnp.dot(lhs_ref[...], rhs_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)
        whole = (row0 >= lo) & (row0 + block_m <= hi)

        @pl.when(whole)
        def _store_all():
            o_ref[...] = res

        @pl.when(jnp.logical_not(whole))
        def _store_rows():
            rows = row0 + lax.broadcasted_iota(jnp.int32, res.shape, 0)
            o_ref[...] = jnp.where((rows >= lo) & (rows < hi), res, o_ref[...])


def _vmem_limit(block_m, block_n, k, isz, osz) -> int:
    tiles = 2 * isz * (block_m * k + k * block_n) + 2 * osz * block_m * block_n
    need = tiles + 3 * 4 * block_m * block_n  # the f32 product and its casts / selects
    return int(min(max(need * 5 // 4, 16 << 20), 100 << 20))


@functools.partial(jax.jit, static_argnames=("block_m", "block_n"))
def grouped_matmul(lhs, rhs, group_sizes, *, block_m: int, block_n: int):
    (m, k), (num_groups, k_r, n) = lhs.shape, rhs.shape
    if k != k_r:
        raise ValueError(f"contracting dims differ: lhs is [M={m}, K={k}], rhs is [G, K={k_r}, N={n}]")
    bm = _fit(m, block_m, SUBLANES, "block_m")
    bn = _fit(n, block_n, LANES, "block_n")
    tid, gid, starts, ends, total = _schedule(group_sizes, m, bm)
    num_items = tid.shape[0]
    grid = (n // bn, num_items)
    out_dtype = lhs.dtype
    isz, osz = jnp.dtype(lhs.dtype).itemsize, jnp.dtype(out_dtype).itemsize
    cost = pl.CostEstimate(
        flops=2 * m * k * n,
        transcendentals=0,
        bytes_accessed=isz * (m * k * grid[0] + num_groups * k * n) + osz * m * n,
    )
    kernel = functools.partial(_gmm_kernel, block_m=bm)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=5,
        grid=grid,
        in_specs=[
            pl.BlockSpec((bm, k), lambda j, w, tid, gid, s, e, tot: (tid[w], 0)),
            pl.BlockSpec((None, k, bn), lambda j, w, tid, gid, s, e, tot: (gid[w], 0, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda j, w, tid, gid, s, e, tot: (tid[w], j)),
    )
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
        grid_spec=grid_spec,
        # Work items of one tile must run in order on one core (they share the resident output tile).
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"),
                                             vmem_limit_bytes=_vmem_limit(bm, bn, k, isz, osz)),
        cost_estimate=cost,
        interpret=False,
    )(tid, gid, starts, ends, total, lhs, rhs)


def workload(lhs, rhs, group_sizes, *, block_m: int = 256, block_n: int = 2048):
    """lax.ragged_dot(lhs, rhs, group_sizes) with f32 accumulation, in lhs's dtype."""
    return grouped_matmul(lhs, rhs, group_sizes, block_m=block_m, block_n=block_n)
