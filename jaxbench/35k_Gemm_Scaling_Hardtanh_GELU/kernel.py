"""Pallas TPU kernel for 35k_Gemm_Scaling_Hardtanh_GELU: tiled x @ w.T with the bias add, scaling, hardtanh and
exact (erf) GELU fused as an epilogue on the f32 accumulator."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Candidate values per tunable, for the autotuner. Large tiles as in 8p_GEMM: at full size (4096 x 8192 x 8192,
# bf16) smaller ones re-read x and w so often that the kernel turns memory-bound on v6e. The defaults
# (1024 x 2048 x 2048) need about 48 MiB of VMEM, so the kernel asks for a scoped limit sized from them. By
# `maxkernel estimate` they take 3.13 ms on v5e and 0.70 ms on v6e (XLA: 2.82 and 0.68), as does 2048 x 1024 x 2048;
# for 27k_Matmul_Mish_Mish, the same GEMM, 2048 x 1024 x 2048 was slower. 1024 x 2048 x 4096 compiles (72 MiB) but
# libtpu's profiled compile behind the estimate refused it for 27k: "Used 148.41M of 128.00M vmem ... scoped 68.32M,
# HLO temp 80.09M" (the HLO temp apparently the requested limit plus the bias), so it cannot be priced. Not every
# combination compiles, and the autotuner treats a compile failure as a rejected candidate.
# Session 35, by `maxkernel estimate`: 2048 x 2048 x 1024 re-reads w twice rather than four times, and
# on v6e it takes 0.632 ms against 0.694 for 1024 x 2048 x 2048 (XLA 0.95); the defaults since (v5e: the kernel table). About 48 MiB of VMEM, as before.
TUNABLES = {
    "block_m": (256, 512, 1024, 2048),
    "block_n": (512, 1024, 2048),
    "block_k": (512, 1024, 2048, 4096),
}

# TPU vregs are (8 sublanes, 128 lanes): a block's last two dims must be multiples of these or the whole dim.
SUBLANES, LANES = 8, 128

# The epilogue walks the output tile in (16, 512) pieces: 8 f32 vregs per value, so the activation's temporaries
# stay in registers instead of whole-tile f32 arrays in VMEM (a 1024 x 2048 f32 value is 8 MiB), and the bf16
# result fills whole packed (16, 128) vregs. A block not divisible by a piece is taken whole along that dim. The
# loop over pieces is unrolled 4 times so the scheduler can interleave independent pieces (a rolled loop estimated
# 3.18 ms on v5e for 27k_Matmul_Mish_Mish against 3.07 ms for four pieces per iteration).
EPILOGUE_ROWS, EPILOGUE_COLS = 16, 512
EPILOGUE_UNROLL = 4

# x[bm, bk] . w[bn, bk] over their last dims: w stays in torch Linear layout and the MXU takes it transposed.
_CONTRACT_LAST = (((1,), (1,)), ((), ()))

# The task's CONFIG values.
SCALING_FACTOR = 0.5
HARDTANH_MIN = -2.0
HARDTANH_MAX = 2.0

_SQRT_HALF = 1.0 / math.sqrt(2.0)

# One erf per output.
_TRANSCENDENTALS_PER_OUTPUT = 1


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
        # K is the lane dim of both x and w tiles, N the sublane dim of w and the lane dim of the output.
        for dim, extent, block, align in (("batch_size", m, sizes.block_m, SUBLANES),
                                          ("out_features", n, sizes.block_n, LANES),
                                          ("in_features", k, sizes.block_k, LANES)):
            if extent % block:
                raise ValueError(f"block for {dim}={extent} is {block}, which does not divide it")
            if block != extent and block % align:
                raise ValueError(f"block for {dim}={extent} is {block}: must be a multiple of {align} or all of it")
        return sizes


def _vmem_limit(bs: BlockSizes, in_dtype, out_dtype) -> int:
    """Scoped VMEM for these tiles: double-buffered x, w, bias and output blocks, the f32 accumulator and the dot's
    f32 partial product (Mosaic materialises it before the add), with a quarter more for Mosaic's own scratch; never
    below the 16 MiB default, never above 100 MiB (v5e and v6e have 128)."""
    isz, osz = jnp.dtype(in_dtype).itemsize, jnp.dtype(out_dtype).itemsize
    tiles = (2 * isz * (bs.block_m * bs.block_k + bs.block_n * bs.block_k + SUBLANES * bs.block_n)
             + 2 * osz * bs.block_m * bs.block_n)
    need = tiles + 2 * 4 * bs.block_m * bs.block_n
    return int(min(max(need * 5 // 4, 16 << 20), 100 << 20))


def _gelu_exact(v):
    # 0.5 * v * (1 + erf(v / sqrt(2))); the baseline's jax.nn.gelu(approximate=False) writes it with erfc(-v / sqrt 2),
    # which only differs far in the negative tail, and the hardtanh keeps v within [-2, 2].
    return 0.5 * v * (1.0 + lax.erf(v * _SQRT_HALF))


def _gemm_scaling_hardtanh_gelu_kernel(x_ref, w_ref, b_ref, o_ref, acc_ref):
    # x_ref: [block_m, block_k], w_ref: [block_n, block_k], b_ref: [1, block_n], o_ref / acc_ref: [block_m, block_n]
    k = pl.program_id(2)

    def partial_sum():
        return lax.dot_general(x_ref[...], w_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)

    # The first K step stores its product (no zero fill, one read-modify-write less); later ones add to it.
    @pl.when(k == 0)
    def _first():
        acc_ref[...] = partial_sum()

    @pl.when(k > 0)
    def _accumulate():
        acc_ref[...] += partial_sum()

    # The epilogue runs once per output tile, on the f32 accumulator, so nothing is rounded before the last cast;
    # the output block is written to HBM once, after the grid leaves it.
    @pl.when(k == pl.num_programs(2) - 1)
    def _epilogue():
        block_m, block_n = acc_ref.shape
        rows_per = EPILOGUE_ROWS if block_m % EPILOGUE_ROWS == 0 else block_m
        cols_per = EPILOGUE_COLS if block_n % EPILOGUE_COLS == 0 else block_n
        n_cols = block_n // cols_per

        # One loop over the pieces (not a Python loop over columns), so the kernel body is the same program at every
        # size and only loop lengths and shapes follow the blocks.
        def _piece(t, carry):
            rows = pl.ds(pl.multiple_of(t // n_cols * rows_per, rows_per), rows_per)
            cols = pl.ds(pl.multiple_of(t % n_cols * cols_per, cols_per), cols_per)
            y = acc_ref[rows, cols] + b_ref[:, cols].astype(jnp.float32)
            z = jnp.clip(y * SCALING_FACTOR, HARDTANH_MIN, HARDTANH_MAX)
            o_ref[rows, cols] = _gelu_exact(z).astype(o_ref.dtype)
            return carry

        lax.fori_loop(0, block_m // rows_per * n_cols, _piece, 0, unroll=EPILOGUE_UNROLL)


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k"))
def workload(
    x: jax.Array,  # [batch_size, in_features]
    w: jax.Array,  # [out_features, in_features]
    b: jax.Array,  # [out_features]
    *,
    block_m: int = 2048,
    block_n: int = 2048,
    block_k: int = 1024,
) -> jax.Array:  # [batch_size, out_features] in x's dtype
    """gelu(hardtanh(scaling_factor * (x @ w.T + b))) in one kernel: f32 accumulation over K, epilogue on the last
    K step."""
    (m, k), (n, k_w) = x.shape, w.shape
    if k != k_w:
        raise ValueError(f"in_features differ: x is [batch_size={m}, in_features={k}], w is [{n}, in_features={k_w}]")
    if b.shape != (n,):
        raise ValueError(f"b has shape {b.shape}, expected (out_features={n},)")
    bs = BlockSizes.fit(m, n, k, block_m=block_m, block_n=block_n, block_k=block_k)
    grid = (m // bs.block_m, n // bs.block_n, k // bs.block_k)
    out_dtype = x.dtype
    size = jnp.dtype(x.dtype).itemsize
    cost = pl.CostEstimate(
        # GEMM, bias add, scale, clamp (2), and GELU's scale, add, two multiplies (the erf aside).
        flops=2 * m * n * k + m * n * (1 + 1 + 2 + 4),
        transcendentals=_TRANSCENDENTALS_PER_OUTPUT * m * n,
        # x is streamed once per column of output tiles, w once per row of them.
        bytes_accessed=(size * (m * k * grid[1] + n * k * grid[0]) + jnp.dtype(out_dtype).itemsize * m * n
                        + n * jnp.dtype(b.dtype).itemsize),
    )
    return pl.pallas_call(
        _gemm_scaling_hardtanh_gelu_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bs.block_n, bs.block_k), lambda i, j, kk: (j, kk)),
            pl.BlockSpec((1, bs.block_n), lambda i, j, kk: (0, j)),
        ],
        out_specs=pl.BlockSpec((bs.block_m, bs.block_n), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bs.block_m, bs.block_n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=_vmem_limit(bs, x.dtype, out_dtype)),
        cost_estimate=cost,
        interpret=False,
    )(x, w, b.reshape(1, n))
