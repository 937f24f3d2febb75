"""Pallas TPU kernel for 45k_Gemm_GroupNorm_Swish_Multiply_Swish: tiled x @ w.T with the bias, GroupNorm, swish,
multiply and swish fused as an epilogue on the f32 accumulator.

GroupNorm's groups are GROUP_SIZE (32) contiguous output features of one row, so when block_n is a multiple of the
group size every group lies inside one output tile and its mean and variance are local to the tile: the epilogue at
the last K step normalises the accumulator and the un-normalised GEMM output is never written to HBM (XLA writes it
in f32 and reads it back for the statistics and again for the normalisation)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# The task's constants: features per group (out_features // num_groups, 32 at every size) and GroupNorm's eps.
GROUP_SIZE = 32
EPS = 1e-5

# Candidate values per tunable. The defaults are the large GEMM tiles of 19k / 27k (x and w re-read four times each
# at full size, 4096 x 8192 x 8192); they need about 48 MiB of VMEM, so the kernel asks for a limit sized from them.
TUNABLES = {
    "block_m": (256, 512, 1024, 2048),
    "block_n": (512, 1024, 2048),
    "block_k": (512, 1024, 2048, 4096),
}

SUBLANES, LANES = 8, 128
# The epilogue's piece width where block_n allows: 256 lanes fill v6e's 256-wide MXU with the group-sum products
# (a 128-wide piece uses a quarter of it). `maxkernel estimate`, 45k at full size: v6e 1.14 -> 0.94 ms, v5e 3.29
# -> 3.35 ms; with the variance's sum taken from the bf16 high part alone, v6e 0.93 and v5e 3.26.
PIECE = 256

# The epilogue walks the output tile in (EPILOGUE_ROWS, piece) pieces. On each piece the per-group sums are one MXU
# product with a [piece, piece] block-diagonal matrix of ones (one block per group), which sums each group's lanes and
# broadcasts the sum back to them in one step; the f32 operand is split into bf16 high and low parts (two exact-ones
# products accumulated in f32), so the group means keep about 16 mantissa bits (the variance, a sum of squares, 8). The
# piece is tall so that each load of the ones matrix into the MXU serves many rows.
EPILOGUE_ROWS = 128
EPILOGUE_UNROLL = 2

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


def _vmem_limit(bs: BlockSizes, in_dtype, out_dtype) -> int:
    """Scoped VMEM: double-buffered x, w, output and per-feature vector blocks, the f32 accumulator and the dot's f32
    partial product, plus a quarter for Mosaic's scratch; between the 16 MiB default and 100 MiB."""
    isz, osz = jnp.dtype(in_dtype).itemsize, jnp.dtype(out_dtype).itemsize
    tiles = (2 * isz * (bs.block_m * bs.block_k + bs.block_n * bs.block_k + 4 * SUBLANES * bs.block_n)
             + 2 * osz * bs.block_m * bs.block_n)
    need = tiles + 2 * 4 * bs.block_m * bs.block_n
    return int(min(max(need * 5 // 4, 16 << 20), 100 << 20))


def _sigmoid(v):
    # One EUP op (tanh) instead of exp and a reciprocal.
    return 0.5 * jnp.tanh(0.5 * v) + 0.5


def _group_sum(v, ones):
    """Per-group sums of f32 v [rows, 128], broadcast back over each group's lanes, via the MXU in ~16-bit precision."""
    # hi is v with its low 16 bits cleared (exact in bfloat16), lo the rest. Not v.astype(bf16) widened back: that
    # f32 -> bf16 -> f32 round trip makes libtpu's static profiler abort on v5e (LLO type check "Expected vector"),
    # so the kernel could not be estimated there, though it compiles.
    hi32 = lax.bitcast_convert_type(lax.bitcast_convert_type(v, jnp.uint32) & jnp.uint32(0xFFFF0000), jnp.float32)
    hi = hi32.astype(jnp.bfloat16)
    lo = (v - hi32).astype(jnp.bfloat16)
    return (jnp.dot(hi, ones, preferred_element_type=jnp.float32)
            + jnp.dot(lo, ones, preferred_element_type=jnp.float32))


def _kernel(x_ref, w_ref, b_ref, g_ref, beta_ref, mw_ref, o_ref, acc_ref):
    # x_ref: [bm, bk], w_ref: [bn, bk], b/g/beta/mw_ref: [1, bn], o_ref / acc_ref: [bm, bn]
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += lax.dot_general(x_ref[...], w_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _epilogue():
        block_m, block_n = acc_ref.shape
        rows_per = EPILOGUE_ROWS if block_m % EPILOGUE_ROWS == 0 else block_m
        piece = PIECE if block_n % PIECE == 0 else LANES
        n_cols = block_n // piece
        lane_group = lax.broadcasted_iota(jnp.int32, (piece, piece), 0) // GROUP_SIZE
        ones = (lane_group == lax.broadcasted_iota(jnp.int32, (piece, piece), 1) // GROUP_SIZE).astype(jnp.bfloat16)
        inv_g = 1.0 / GROUP_SIZE

        def _piece(t, carry):
            rows = pl.ds(pl.multiple_of(t // n_cols * rows_per, rows_per), rows_per)
            cols = pl.ds(pl.multiple_of(t % n_cols * piece, piece), piece)
            z = acc_ref[rows, cols] + b_ref[:, cols].astype(jnp.float32)
            d = z - _group_sum(z, ones) * inv_g
            # d * d is never negative and nothing cancels in its sum: bf16 (8 bits) is enough for the variance.
            var = jnp.dot((d * d).astype(jnp.bfloat16), ones, preferred_element_type=jnp.float32) * inv_g
            y = d * (lax.rsqrt(var + EPS) * g_ref[:, cols].astype(jnp.float32)) + beta_ref[:, cols].astype(jnp.float32)
            y = y * _sigmoid(y) * mw_ref[:, cols].astype(jnp.float32)
            o_ref[rows, cols] = (y * _sigmoid(y)).astype(o_ref.dtype)
            return carry

        lax.fori_loop(0, block_m // rows_per * n_cols, _piece, 0, unroll=EPILOGUE_UNROLL)


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k"))
def workload(
    x: jax.Array,  # [batch_size, in_features]
    w: jax.Array,  # [out_features, in_features]
    b: jax.Array,  # [out_features]
    gn_weight: jax.Array,  # [out_features]
    gn_bias: jax.Array,  # [out_features]
    multiply_weight: jax.Array,  # [out_features]
    *,
    block_m: int = 1024,
    block_n: int = 2048,
    block_k: int = 2048,
) -> jax.Array:  # [batch_size, out_features] in x's dtype
    """swish(swish(groupnorm(x @ w.T + b)) * multiply_weight) in one kernel: f32 accumulation and statistics."""
    (m, k), (n, k_w) = x.shape, w.shape
    if k != k_w:
        raise ValueError(f"in_features differ: x is [batch_size={m}, in_features={k}], w is [{n}, in_features={k_w}]")
    for name, v in (("b", b), ("gn_weight", gn_weight), ("gn_bias", gn_bias), ("multiply_weight", multiply_weight)):
        if v.shape != (n,):
            raise ValueError(f"{name} has shape {v.shape}, expected (out_features={n},)")
    if n % GROUP_SIZE or LANES % GROUP_SIZE:
        raise ValueError(f"out_features={n} must be whole groups of {GROUP_SIZE}, and {GROUP_SIZE} must divide {LANES}")
    bs = BlockSizes.fit(m, n, k, block_m=block_m, block_n=block_n, block_k=block_k)
    grid = (m // bs.block_m, n // bs.block_n, k // bs.block_k)
    out_dtype = x.dtype
    size = jnp.dtype(x.dtype).itemsize
    cost = pl.CostEstimate(
        # GEMM; four ones-products of width 128 for the statistics; ~20 VPU ops per output for the rest.
        flops=2 * m * n * k + 4 * 2 * m * n * LANES + 20 * m * n,
        transcendentals=3 * m * n,  # rsqrt and two tanh per output
        bytes_accessed=(size * (m * k * grid[1] + n * k * grid[0]) + jnp.dtype(out_dtype).itemsize * m * n
                        + 4 * n * size),
    )
    vec_spec = pl.BlockSpec((1, bs.block_n), lambda i, j, kk: (0, j))
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bs.block_n, bs.block_k), lambda i, j, kk: (j, kk)),
            vec_spec, vec_spec, vec_spec, vec_spec,
        ],
        out_specs=pl.BlockSpec((bs.block_m, bs.block_n), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bs.block_m, bs.block_n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=_vmem_limit(bs, x.dtype, out_dtype)),
        cost_estimate=cost,
        interpret=False,
    )(x, w, b.reshape(1, n), gn_weight.reshape(1, n), gn_bias.reshape(1, n), multiply_weight.reshape(1, n))
