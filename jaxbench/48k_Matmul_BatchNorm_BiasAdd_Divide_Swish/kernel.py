"""Pallas TPU kernel for 48k_Matmul_BatchNorm_BiasAdd_Divide_Swish: swish((batchnorm(x @ w.T + b) + bias) / divide),
BatchNorm in training form (batch statistics over the whole batch).

BatchNorm needs each feature's mean and variance over every M tile before any output can be normalised, so:

  pass 1 (GEMM): a large-tile GEMM whose f32 accumulator is the f32 output block itself; its epilogue writes the
         pre-bias product y = x @ w.T and, per (M tile, column), the tile's column mean and sum of squared
         deviations (shifted by the tile's first row, so no cancellation);
  tiny XLA step: Chan's combination of the per-tile moments into the batch mean/variance, folded with b,
         bn_weight, bn_bias, bias and divide_value into one per-feature multiplier A and offset C (O(M/bm * N));
  pass 2 (normalise): t = y * A + C, out = t * sigmoid(t) in x's dtype, elementwise over f32 y.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BN_EPS = 1e-5  # CONFIG["bn_eps"]
DIVIDE_VALUE = 1.0  # CONFIG["divide_value"]

# Tile candidates. GEMM tiles as in 19k (1024 x 2048 x 2048 keeps x and w re-reads low so the GEMM stays compute
# bound on v6e); block_r x block_c is the f32 tile of the elementwise normalise pass.
TUNABLES = {
    "block_m": (512, 1024, 2048),
    "block_n": (1024, 2048),
    "block_k": (1024, 2048),
    "block_r": (256, 512, 1024),
    "block_c": (1024, 2048, 4096),
}

SUBLANES, LANES = 8, 128
_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # x[bm, bk] . w[bn, bk]: w stays in torch Linear layout
_STAT_COLS = 128  # the stats epilogue walks (_STAT_ROWS, 128) f32 pieces (8 vregs per value); 128 divides every block_n, so
# the loop structure is the same at every size
# Rows per step of the stats epilogue's walk down a column chunk: 64 rows are 8 independent vregs of running sums per
# 128 lanes, where 8 rows (one vreg) made every add wait for the one before it. On 31k at full size this took the
# GEMM-and-stats pass from 5.14 to 2.90 ms on v6e (`maxkernel estimate` of that pass alone); the sums are the same,
# taken in more partial sums.
_STAT_ROWS = 64


def _check(extent, block, align, dim):
    if extent % block:
        raise ValueError(f"block for {dim}={extent} is {block}, which does not divide it")
    if block != extent and block % align:
        raise ValueError(f"block for {dim}={extent} is {block}: must be a multiple of {align} or all of it")


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    block_m: int
    block_n: int
    block_k: int
    block_r: int
    block_c: int

    @classmethod
    def fit(cls, m, n, k, *, block_m, block_n, block_k, block_r, block_c):
        """Blocks clamped to the array dims (one setting serves smoke and full size), then validated."""
        bs = cls(min(block_m, m), min(block_n, n), min(block_k, k), min(block_r, m), min(block_c, n))
        for dim, extent, block, align in (("batch_size", m, bs.block_m, SUBLANES),
                                          ("out_features", n, bs.block_n, LANES),
                                          ("in_features", k, bs.block_k, LANES),
                                          ("batch_size (normalise pass)", m, bs.block_r, SUBLANES),
                                          ("out_features (normalise pass)", n, bs.block_c, LANES)):
            if block <= 0:
                raise ValueError(f"block for {dim} must be positive, got {block}")
            _check(extent, block, align, dim)
        return bs


def _gemm_vmem_limit(bs: BlockSizes, isz: int) -> int:
    # double-buffered x and w blocks and f32 output block, the dot's f32 partial product, stats blocks; +25%.
    need = (2 * isz * (bs.block_m * bs.block_k + bs.block_n * bs.block_k) + 2 * 4 * bs.block_m * bs.block_n
            + 4 * bs.block_m * bs.block_n + 4 * 4 * SUBLANES * bs.block_n)
    return int(min(max(need * 5 // 4, 16 << 20), 100 << 20))


def _gemm_stats_kernel(x_ref, w_ref, y_ref, mu_ref, m2_ref):
    # x_ref: [bm, bk], w_ref: [bn, bk]; y_ref: [bm, bn] f32 (resident across K: it is the accumulator);
    # mu_ref / m2_ref: [1, 1, bn] f32, this M tile's column mean and sum of squared deviations.
    k = pl.program_id(2)
    prod = lax.dot_general(x_ref[...], w_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)

    @pl.when(k == 0)
    def _first():
        y_ref[...] = prod

    @pl.when(k > 0)
    def _acc():
        y_ref[...] += prod

    @pl.when(k == pl.num_programs(2) - 1)
    def _stats():
        bm, bn = y_ref.shape
        rows_per = _STAT_ROWS if bm % _STAT_ROWS == 0 else bm
        cols_per = _STAT_COLS if bn % _STAT_COLS == 0 else bn

        def _col_chunk(c, carry):
            cols = pl.ds(pl.multiple_of(c * cols_per, cols_per), cols_per)
            shift = y_ref[pl.ds(0, 1), cols]  # the tile's first row: sums of (y - shift) do not cancel

            def _rows(r, acc):
                s1, s2 = acc
                rows = pl.ds(pl.multiple_of(r * rows_per, rows_per), rows_per)
                d = y_ref[rows, cols] - shift
                return s1 + d, s2 + d * d

            zero = jnp.zeros((rows_per, cols_per), jnp.float32)
            s1, s2 = lax.fori_loop(0, bm // rows_per, _rows, (zero, zero), unroll=4)
            s1 = jnp.sum(s1, axis=0, keepdims=True)
            s2 = jnp.sum(s2, axis=0, keepdims=True)
            mean_d = s1 * (1.0 / bm)
            mu_ref[0, :, cols] = shift + mean_d
            m2_ref[0, :, cols] = jnp.maximum(s2 - s1 * mean_d, 0.0)
            return carry

        lax.fori_loop(0, bn // cols_per, _col_chunk, 0)


def gemm_with_column_stats(x, w, bs: BlockSizes):
    """y = x @ w.T in f32 [M, N], plus per-M-tile column means and M2 [M/bm, 1, N]."""
    (m, k), n = x.shape, w.shape[0]
    grid = (m // bs.block_m, n // bs.block_n, k // bs.block_k)
    isz = jnp.dtype(x.dtype).itemsize
    stats = jax.ShapeDtypeStruct((grid[0], 1, n), jnp.float32)
    cost = pl.CostEstimate(flops=2 * m * n * k + 4 * m * n, transcendentals=0,
                           bytes_accessed=isz * (m * k * grid[1] + n * k * grid[0]) + 4 * m * n + 8 * grid[0] * n)
    return pl.pallas_call(
        _gemm_stats_kernel,
        out_shape=(jax.ShapeDtypeStruct((m, n), jnp.float32), stats, stats),
        grid=grid,
        in_specs=[pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((bs.block_n, bs.block_k), lambda i, j, kk: (j, kk))],
        out_specs=(pl.BlockSpec((bs.block_m, bs.block_n), lambda i, j, kk: (i, j)),
                   pl.BlockSpec((1, 1, bs.block_n), lambda i, j, kk: (i, 0, j)),
                   pl.BlockSpec((1, 1, bs.block_n), lambda i, j, kk: (i, 0, j))),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=_gemm_vmem_limit(bs, isz)),
        cost_estimate=cost,
        interpret=False,
    )(x, w)


def batch_moments(mu_t, m2_t, block_m):
    """Chan's parallel combination of equal-count per-tile moments: the batch mean and biased variance [N]."""
    g = mu_t.shape[0]
    mu_t, m2_t = mu_t[:, 0, :], m2_t[:, 0, :]
    mean = jnp.mean(mu_t, axis=0)
    m2 = jnp.sum(m2_t, axis=0) + block_m * jnp.sum(jnp.square(mu_t - mean), axis=0)
    return mean, m2 / (g * block_m)


_PIECE_ROWS, _PIECE_COLS = 16, 256  # the normalise pass walks (16, 256) pieces: 4 f32 vregs per value (256 divides
# block_c at every size, smoke included, so the program does not change with the size)


def _normalize_kernel(y_ref, a_ref, c_ref, o_ref):
    # y_ref: [br, bc] f32 pre-bias GEMM output; a_ref / c_ref: [1, bc] f32; o_ref: [br, bc]
    br, bc = y_ref.shape
    rows_per = _PIECE_ROWS if br % _PIECE_ROWS == 0 else br
    cols_per = _PIECE_COLS if bc % _PIECE_COLS == 0 else bc
    n_cols = bc // cols_per

    def _piece(t, carry):
        rows = pl.ds(pl.multiple_of(t // n_cols * rows_per, rows_per), rows_per)
        cols = pl.ds(pl.multiple_of(t % n_cols * cols_per, cols_per), cols_per)
        v = y_ref[rows, cols] * a_ref[:, cols] + c_ref[:, cols]
        # v * sigmoid(v), the sigmoid as 0.5 + 0.5 tanh(v / 2): one transcendental where 1 / (1 + e^-v) takes two.
        o_ref[rows, cols] = (v * (0.5 + 0.5 * jnp.tanh(0.5 * v))).astype(o_ref.dtype)
        return carry

    lax.fori_loop(0, br // rows_per * n_cols, _piece, 0, unroll=4)


def affine_swish(y, a, c, out_dtype, bs: BlockSizes):
    """swish(y * a + c) elementwise, in out_dtype."""
    m, n = y.shape
    br, bc = bs.block_r, bs.block_c
    osz = jnp.dtype(out_dtype).itemsize
    need = 2 * br * bc * (4 + osz) + 4 * 4 * SUBLANES * bc
    cost = pl.CostEstimate(flops=6 * m * n, transcendentals=m * n, bytes_accessed=(4 + osz) * m * n + 8 * n)
    return pl.pallas_call(
        _normalize_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
        grid=(m // br, n // bc),
        in_specs=[pl.BlockSpec((br, bc), lambda i, j: (i, j)),
                  pl.BlockSpec((1, bc), lambda i, j: (0, j)),
                  pl.BlockSpec((1, bc), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((br, bc), lambda i, j: (i, j)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"),
                                             vmem_limit_bytes=int(min(max(need * 5 // 4, 16 << 20), 100 << 20))),
        cost_estimate=cost,
        interpret=False,
    )(y, a.reshape(1, n), c.reshape(1, n))


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k", "block_r", "block_c"))
def workload(
    x: jax.Array,  # [batch_size, in_features]
    w: jax.Array,  # [out_features, in_features]
    b: jax.Array,  # [out_features]
    bn_weight: jax.Array,  # [out_features]
    bn_bias: jax.Array,  # [out_features]
    bias: jax.Array,  # [out_features]
    *,
    block_m: int = 1024,
    block_n: int = 2048,
    block_k: int = 2048,
    block_r: int = 512,
    block_c: int = 2048,
) -> jax.Array:  # [batch_size, out_features] in x's dtype
    """swish((batchnorm_train(x @ w.T + b) + bias) / divide_value): GEMM + column stats kernel, then an elementwise
    normalise kernel."""
    (m, k), (n, k_w) = x.shape, w.shape
    if k != k_w:
        raise ValueError(f"in_features differ: x is [batch_size={m}, in_features={k}], w is [{n}, in_features={k_w}]")
    for name, v in (("b", b), ("bn_weight", bn_weight), ("bn_bias", bn_bias), ("bias", bias)):
        if v.shape != (n,):
            raise ValueError(f"{name} has shape {v.shape}, expected (out_features={n},)")
    bs = BlockSizes.fit(m, n, k, block_m=block_m, block_n=block_n, block_k=block_k, block_r=block_r, block_c=block_c)
    y, mu_t, m2_t = gemm_with_column_stats(x, w, bs)
    # z = y + b; BatchNorm of z: (y + b - mean_z) * rstd with mean_z = mean_y + b (the bias cancels exactly).
    mean_y, var = batch_moments(mu_t, m2_t, bs.block_m)
    f32 = jnp.float32
    b32 = b.astype(f32)
    a = lax.rsqrt(var + BN_EPS) * bn_weight.astype(f32)
    c = ((b32 - (mean_y + b32)) * a + bn_bias.astype(f32) + bias.astype(f32)) / DIVIDE_VALUE
    return affine_swish(y, a / DIVIDE_VALUE, c, x.dtype, bs)
