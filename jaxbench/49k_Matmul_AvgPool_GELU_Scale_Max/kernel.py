"""Pallas TPU kernel for 49k_Matmul_AvgPool_GELU_Scale_Max: tiled x @ w.T whose epilogue pools the f32 accumulator
in VMEM and folds the pooled values into per-row, lane-wise max / min, so the [batch, out] GEMM output never reaches
HBM. Each (M block, N block) tile writes its own [block_m, 128] max and min (1/16 of the tile's f32 bytes each at the
default block_n), and the wrapper reduces a row's out_features / block_n * 128 of them: an O(batch) combine. N stays
a parallel grid axis, so megacore chips split it too and `maxkernel estimate` can profile a single tile.

GELU is unimodal (decreasing below its minimum near -0.75, increasing above it), so over any set of pooled values its
maximum is at the set's largest or smallest element: max_j gelu(p_j) = max(gelu(max_j p_j), gelu(min_j p_j)), and
scale_factor > 0 keeps that order. The kernel therefore finds only the max and min of the pooled values, and the
wrapper applies GELU and the scale to two values per row, exactly as the baseline would to those values."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# The task's constants (CONFIG["pool_kernel_size"], CONFIG["scale_factor"]).
POOL = 16  # _window_sums below is written out for this window (four roll-and-add steps)
SCALE_FACTOR = 2.0

# Candidate values per tunable. At full size (4096 x 8192 x 8192, bf16) large output tiles keep x and w re-reads
# low; K takes four steps of 2048 with the defaults.
TUNABLES = {
    "block_m": (256, 512, 1024, 2048),
    "block_n": (512, 1024, 2048),
    "block_k": (512, 1024, 2048, 4096),
}

SUBLANES, LANES = 8, 128

# The epilogue walks the accumulator in (EPILOGUE_ROWS, 128) pieces; an inner loop over a row group's 128-lane
# column chunks carries its lane-wise max / min in registers and stores them once into the outputs.
EPILOGUE_ROWS = 16
EPILOGUE_UNROLL = 4

_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # x[bm, bk] . w[bn, bk]: w stays in torch Linear layout
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes over batch (M), out_features (N) and in_features (K); build with `fit`."""

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
        # The epilogue pools whole 128-lane chunks, each holding 128 / POOL complete pooling windows.
        if sizes.block_n % LANES:
            raise ValueError(f"block for out_features is {sizes.block_n}: must be a multiple of {LANES}")
        return sizes


def _vmem_limit(bs: BlockSizes, in_dtype) -> int:
    """Scoped VMEM: double-buffered x, w and f32 bias blocks, the f32 accumulator and the dot's f32 partial product,
    the two double-buffered [block_m, 128] max / min blocks, with a quarter more for Mosaic's scratch; within
    [16, 100] MiB."""
    isz = jnp.dtype(in_dtype).itemsize
    tiles = 2 * isz * (bs.block_m * bs.block_k + bs.block_n * bs.block_k) + 2 * 4 * SUBLANES * bs.block_n
    need = tiles + 2 * 4 * bs.block_m * bs.block_n + 2 * 2 * 4 * bs.block_m * LANES
    return int(min(max(need * 5 // 4, 16 << 20), 100 << 20))


def _window_sums(v):
    """Lane-wise sums of POOL consecutive lanes (rolling within each 128-lane row): after log2(POOL) roll-and-add
    steps, the lane that closes each aligned window holds that window's sum; other lanes hold sums that straddle
    windows and are masked out at the end (see _window_mask)."""
    v = v + pltpu.roll(v, 1, 1)  # sums of lanes 2 at a time
    v = v + pltpu.roll(v, 2, 1)  # 4
    v = v + pltpu.roll(v, 4, 1)  # 8
    return v + pltpu.roll(v, 8, 1)  # 16 = POOL


def _window_mask(rows: int):
    """[rows, 128] bool: the lanes whose _window_sums cover exactly one aligned pooling window. Found by window-summing
    each lane's window index: only a lane covering one window gets POOL times its own window index (a straddling
    window mixes two indices, wrapped ones 0 and the last), whichever way the hardware roll turns. Every aligned
    window has exactly one such lane."""
    lane = lax.broadcasted_iota(jnp.int32, (rows, LANES), 1).astype(jnp.float32)
    window = jnp.floor(lane * (1.0 / POOL))  # exact: small integers times a power of two
    return _window_sums(window) == window * POOL


def _gelu(z):
    return 0.5 * z * (1.0 + lax.erf(z * _INV_SQRT2))  # exact (erf) GELU, as the baseline


def _kernel(x_ref, w_ref, b_ref, mx_ref, mn_ref, acc_ref):
    # x_ref: [bm, bk], w_ref: [bn, bk], b_ref: [1, bn] f32, acc_ref: [bm, bn] f32,
    # mx_ref / mn_ref: [bm, 128] f32, this tile's lane-wise max / min of its window sums (-inf / +inf on the lanes
    # whose sums straddle windows).
    k, nk = pl.program_id(2), pl.num_programs(2)

    prod = lax.dot_general(x_ref[...], w_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)

    # The first K step stores its product (no zero fill and re-read); later ones add to it.
    @pl.when(k == 0)
    def _first():
        acc_ref[...] = prod

    @pl.when(k > 0)
    def _accumulate():
        acc_ref[...] += prod

    @pl.when(k == nk - 1)
    def _epilogue():
        block_m, block_n = acc_ref.shape
        rows_per = EPILOGUE_ROWS if block_m % EPILOGUE_ROWS == 0 else block_m
        mask = _window_mask(rows_per)
        hi0 = jnp.full((rows_per, LANES), -jnp.inf, jnp.float32)
        lo0 = jnp.full((rows_per, LANES), jnp.inf, jnp.float32)

        def _row_group(g, carry):
            rows = pl.ds(pl.multiple_of(g * rows_per, rows_per), rows_per)

            def _chunk(c, stats):
                hi, lo = stats
                cols = pl.ds(pl.multiple_of(c * LANES, LANES), LANES)
                s = _window_sums(acc_ref[rows, cols] + b_ref[:, cols])
                return jnp.maximum(hi, s), jnp.minimum(lo, s)

            hi, lo = lax.fori_loop(0, block_n // LANES, _chunk, (hi0, lo0), unroll=EPILOGUE_UNROLL)
            # Only the lanes holding whole windows' sums count; the others get the neutral values.
            mx_ref[rows, :] = jnp.where(mask, hi, -jnp.inf)
            mn_ref[rows, :] = jnp.where(mask, lo, jnp.inf)
            return carry

        lax.fori_loop(0, block_m // rows_per, _row_group, 0)


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k"))
def workload(
    x: jax.Array,  # [batch_size, in_features]
    w: jax.Array,  # [out_features, in_features]
    b: jax.Array,  # [out_features]
    *,
    block_m: int = 1024,
    block_n: int = 2048,
    block_k: int = 2048,
) -> jax.Array:  # [batch_size] in x's dtype
    """max(scale * gelu(avgpool(x @ w.T + b)), axis=1) in one kernel: f32 accumulation and f32 epilogue."""
    (m, k), (n, k_w) = x.shape, w.shape
    if k != k_w:
        raise ValueError(f"in_features differ: x is [batch_size={m}, {k}], w is [out_features={n}, {k_w}]")
    if b.shape != (n,):
        raise ValueError(f"b has shape {b.shape}, expected (out_features={n},)")
    if n % POOL:
        # AvgPool1d would drop the ragged tail; the N blocks here hold whole windows only.
        raise ValueError(f"out_features={n} must be a multiple of pool_kernel_size={POOL}")
    bs = BlockSizes.fit(m, n, k, block_m=block_m, block_n=block_n, block_k=block_k)
    grid = (m // bs.block_m, n // bs.block_n, k // bs.block_k)
    out_dtype = x.dtype
    size = jnp.dtype(x.dtype).itemsize
    cost = pl.CostEstimate(
        flops=2 * m * n * k + 11 * m * n,
        transcendentals=0,
        bytes_accessed=size * (m * k * grid[1] + n * k * grid[0]) + 4 * n * grid[0] + 2 * 4 * m * grid[1] * LANES,
    )
    stats = jax.ShapeDtypeStruct((m, grid[1] * LANES), jnp.float32)
    stat_spec = pl.BlockSpec((bs.block_m, LANES), lambda i, j, kk: (i, j))
    window_max, window_min = pl.pallas_call(
        _kernel,
        out_shape=(stats, stats),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bs.block_n, bs.block_k), lambda i, j, kk: (j, kk)),
            pl.BlockSpec((1, bs.block_n), lambda i, j, kk: (0, j)),
        ],
        # One [bm, 128] block of max and of min per output tile, resident across K and written once.
        out_specs=(stat_spec, stat_spec),
        scratch_shapes=[pltpu.VMEM((bs.block_m, bs.block_n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=_vmem_limit(bs, x.dtype)),
        cost_estimate=cost,
        interpret=False,
    )(x, w, b.astype(jnp.float32).reshape(1, n))
    # O(batch) combine: a row's largest and smallest pooled value (window sum / POOL, exact), GELU of both, scale.
    p_max = jnp.max(window_max, axis=1) * (1.0 / POOL)
    p_min = jnp.min(window_min, axis=1) * (1.0 / POOL)
    return (jnp.maximum(_gelu(p_max), _gelu(p_min)) * SCALE_FACTOR).astype(out_dtype)
