"""Pallas TPU kernels for 26k_BMM_InstanceNorm_Sum_ResidualAdd_Multiply: ((instancenorm(x @ w.T + b) + y) * y).

The instance norm normalises each row over all out_features, a reduction across the N tiles, and its output is
needed at every element, so the statistics must be complete before any output is written. Holding a whole row block
of the GEMM output in VMEM would cap block_m near 512 and re-read w eight times at full size (4096 x 8192 x 8192);
instead two Pallas kernels:
  pass 1: the tiled GEMM accumulates straight into its f32 output block; the epilogue at the last K step adds the
          bias and computes each tile's per-row sum and centred sum of squares (so no later pass re-reads h for the
          statistics, which XLA does twice: once for the mean, once for the variance);
  pass 2: one elementwise sweep ((h - mean) * rstd + y) * y over h, y and the output.
Between them, O(batch * N-tiles) work combines the per-tile statistics (Chan's parallel formula) into each row's
mean and 1/std."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPS = 1e-5  # the task's InstanceNorm eps

# Candidate values per tunable: block_m / block_n / block_k tile the GEMM of pass 1; block_m2 / block_n2 tile the
# elementwise pass 2. Pass 1's defaults (1024 x 2048 x 1024) re-read x and w four times each at full size and
# need about 36 MiB of VMEM (the f32 output block doubles as the accumulator).
TUNABLES = {
    "block_m": (256, 512, 1024),
    "block_n": (512, 1024, 2048),
    "block_k": (512, 1024, 2048),
    "block_m2": (256, 512, 1024),
    "block_n2": (512, 1024, 2048, 4096),
}

SUBLANES, LANES = 8, 128

# Pass 1's epilogue walks each row group of EPILOGUE_ROWS rows across the tile in 128-lane pieces. 128 rows carry 16
# independent vregs of running sums per piece, where 32 rows (4 vregs) made the adds wait on each other: the whole
# kernel went from 3.29 / 1.84 ms to 3.18 / 0.88 ms on v5e / v6e by `maxkernel estimate` (XLA 2.79 / 0.599).
EPILOGUE_ROWS = 128
EPILOGUE_UNROLL = 4

_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # x[bm, bk] . w[bn, bk]: w stays in torch Linear layout


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
        if sizes.block_n % LANES:
            raise ValueError(f"block_n={sizes.block_n} must be a multiple of {LANES} (the epilogue's piece width)")
        return sizes


def _gemm_stats_kernel(x_ref, w_ref, b_ref, h_ref, sum_ref, m2_ref):
    # x_ref: [bm, bk], w_ref: [bn, bk], b_ref: [1, bn]; h_ref: [bm, bn] f32, resident over K: the accumulator.
    # sum_ref / m2_ref: [bm, 128] f32: the tile's per-row sum and sum of squares about the tile's row mean,
    # broadcast over the 128 lanes (lane-dense stores).
    k = pl.program_id(2)
    partial = lax.dot_general(x_ref[...], w_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)

    @pl.when(k == 0)
    def _first():
        h_ref[...] = partial

    @pl.when(k > 0)
    def _accumulate():
        h_ref[...] += partial

    @pl.when(k == pl.num_programs(2) - 1)
    def _epilogue():
        block_m, block_n = h_ref.shape
        rows_per = EPILOGUE_ROWS if block_m % EPILOGUE_ROWS == 0 else block_m
        n_cols = block_n // LANES
        inv_n = 1.0 / block_n

        def _rows(r, carry):
            rows = pl.ds(pl.multiple_of(r * rows_per, rows_per), rows_per)

            def _bias_and_sum(c, s):
                cols = pl.ds(pl.multiple_of(c * LANES, LANES), LANES)
                h = h_ref[rows, cols] + b_ref[:, cols].astype(jnp.float32)
                h_ref[rows, cols] = h
                return s + h

            s = lax.fori_loop(0, n_cols, _bias_and_sum, jnp.zeros((rows_per, LANES), jnp.float32),
                              unroll=EPILOGUE_UNROLL)
            row_sum = jnp.sum(s, axis=1, keepdims=True)  # [rows, 1]
            mean = row_sum * inv_n

            def _centred_squares(c, q):
                d = h_ref[rows, pl.ds(pl.multiple_of(c * LANES, LANES), LANES)] - mean
                return q + d * d

            q = lax.fori_loop(0, n_cols, _centred_squares, jnp.zeros((rows_per, LANES), jnp.float32),
                              unroll=EPILOGUE_UNROLL)
            sum_ref[rows, :] = jnp.broadcast_to(row_sum, (rows_per, LANES))
            m2_ref[rows, :] = jnp.broadcast_to(jnp.sum(q, axis=1, keepdims=True), (rows_per, LANES))
            return carry

        lax.fori_loop(0, block_m // rows_per, _rows, 0)


def _normalize_kernel(h_ref, y_ref, mean_ref, rstd_ref, o_ref):
    # h_ref: [bm2, bn2] f32, y_ref / o_ref: [bm2, bn2], mean_ref / rstd_ref: [bm2, 1] f32
    yf = y_ref[...].astype(jnp.float32)
    o_ref[...] = (((h_ref[...] - mean_ref[...]) * rstd_ref[...] + yf) * yf).astype(o_ref.dtype)


def gemm_and_tile_stats(x, w, b, bs: BlockSizes):
    """Pass 1: h = x @ w.T + b in f32 [M, N], and per (row, N tile) sum and centred sum of squares [M, N/bn]."""
    (m, k), n = x.shape, w.shape[0]
    grid = (m // bs.block_m, n // bs.block_n, k // bs.block_k)
    isz = jnp.dtype(x.dtype).itemsize
    tiles = (2 * isz * (bs.block_m * bs.block_k + bs.block_n * bs.block_k + SUBLANES * bs.block_n)
             + 2 * 4 * bs.block_m * bs.block_n + 2 * 2 * 4 * bs.block_m * LANES)
    need = tiles + 4 * bs.block_m * bs.block_n  # the dot's f32 partial product
    stats = jax.ShapeDtypeStruct((m, grid[1] * LANES), jnp.float32)
    stat_spec = pl.BlockSpec((bs.block_m, LANES), lambda i, j, kk: (i, j))
    h, s, m2 = pl.pallas_call(
        _gemm_stats_kernel,
        out_shape=(jax.ShapeDtypeStruct((m, n), jnp.float32), stats, stats),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bs.block_n, bs.block_k), lambda i, j, kk: (j, kk)),
            pl.BlockSpec((1, bs.block_n), lambda i, j, kk: (0, j)),
        ],
        out_specs=(pl.BlockSpec((bs.block_m, bs.block_n), lambda i, j, kk: (i, j)), stat_spec, stat_spec),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=int(min(max(need * 5 // 4, 16 << 20), 100 << 20))),
        cost_estimate=pl.CostEstimate(
            flops=2 * m * n * k + 5 * m * n, transcendentals=0,
            bytes_accessed=isz * (m * k * grid[1] + n * k * grid[0] + n) + 4 * (m * n + 2 * m * grid[1] * LANES)),
        interpret=False,
    )(x, w, b.reshape(1, n))
    return h, s[:, ::LANES], m2[:, ::LANES]


def normalize_residual(h, y, mean, rstd, block_m2, block_n2):
    """Pass 2: ((h - mean) * rstd + y) * y in y's dtype."""
    m, n = h.shape
    bm, bn = min(block_m2, m), min(block_n2, n)
    if m % bm or n % bn or (bm != m and bm % SUBLANES) or (bn != n and bn % LANES):
        raise ValueError(f"pass-2 blocks {bm} x {bn} do not tile [{m}, {n}] in (8, 128) multiples")
    ysz = jnp.dtype(y.dtype).itemsize
    need = 2 * bm * bn * (4 + 2 * ysz) + 4 * bm * LANES * 4
    tile = lambda i, j: (i, j)  # noqa: E731
    row = lambda i, j: (i, 0)  # noqa: E731
    return pl.pallas_call(
        _normalize_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), y.dtype),
        grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, bn), tile), pl.BlockSpec((bm, bn), tile),
                  pl.BlockSpec((bm, 1), row), pl.BlockSpec((bm, 1), row)],
        out_specs=pl.BlockSpec((bm, bn), tile),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"),
                                             vmem_limit_bytes=int(min(max(need * 5 // 4, 16 << 20), 100 << 20))),
        cost_estimate=pl.CostEstimate(flops=4 * m * n, transcendentals=0,
                                      bytes_accessed=m * n * (4 + 2 * ysz) + 8 * m),
        interpret=False,
    )(h, y, mean, rstd)


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k", "block_m2", "block_n2"))
def workload(
    x: jax.Array,  # [batch_size, in_features]
    y: jax.Array,  # [batch_size, out_features]
    w: jax.Array,  # [out_features, in_features]
    b: jax.Array,  # [out_features]
    *,
    block_m: int = 1024,
    block_n: int = 2048,
    block_k: int = 1024,
    block_m2: int = 512,
    block_n2: int = 2048,
) -> jax.Array:  # [batch_size, out_features] in x's dtype
    """((instancenorm_rows(x @ w.T + b) + y) * y): f32 accumulation and statistics, two Pallas passes."""
    (m, k), (n, k_w) = x.shape, w.shape
    if k != k_w:
        raise ValueError(f"in_features differ: x is [batch_size={m}, in_features={k}], w is [{n}, in_features={k_w}]")
    if y.shape != (m, n):
        raise ValueError(f"y has shape {y.shape}, expected (batch_size={m}, out_features={n})")
    if b.shape != (n,):
        raise ValueError(f"b has shape {b.shape}, expected (out_features={n},)")
    bs = BlockSizes.fit(m, n, k, block_m=block_m, block_n=block_n, block_k=block_k)
    h, tile_sum, tile_m2 = gemm_and_tile_stats(x, w, b, bs)
    # O(batch * N-tiles): Chan's formula combines the tiles' (count, sum, centred M2) into each row's statistics.
    mean = jnp.sum(tile_sum, axis=1, keepdims=True) / n  # [batch, 1]
    tile_mean = tile_sum / bs.block_n
    m2 = jnp.sum(tile_m2 + bs.block_n * jnp.square(tile_mean - mean), axis=1, keepdims=True)
    rstd = lax.rsqrt(m2 / n + EPS)
    return normalize_residual(h, y, mean, rstd, block_m2, block_n2).astype(x.dtype)
