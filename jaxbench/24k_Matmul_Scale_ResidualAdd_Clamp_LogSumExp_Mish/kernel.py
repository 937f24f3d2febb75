"""Pallas TPU kernel for 24k_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish: tiled x @ w.T whose epilogue scales,
doubles (the residual add y + y) and clamps the f32 accumulator and folds exp of it into per-row, lane-wise partial
sums, so the [batch, hidden] GEMM output never leaves VMEM.

The clamp bounds every logit to [CLAMP_MIN, CLAMP_MAX] = [-10, 10], so exp needs no running-max shift: each term lies
in [e^-10, e^10], a row's sum stays far inside f32 range, and log(sum exp(y)) is the row LogSumExp (the baseline's
max shift only guards against overflow, which the clamp rules out).

Each (M block, N block) tile writes its own [block_m, 128] partial sums (f32, 128 lanes per N block: 1/16 of the
tile's bytes at the default block_n), and the wrapper adds a row's hidden_size / block_n * 128 partials, an O(batch)
combine, then log and lse * mish(lse) per row. Keeping N a parallel grid axis (rather than carrying the sums across it) lets the two TensorCores of a
megacore chip split N as well as M, and lets `maxkernel estimate` profile one tile instead of a whole row block."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# The task's constants (CONFIG["scale_factor"], CONFIG["clamp_min"], CONFIG["clamp_max"]).
SCALE_FACTOR = 2.0
CLAMP_MIN, CLAMP_MAX = -10.0, 10.0
# (y + b) * scale, then y + y: one multiply by this power of two (exact in f32), with the bias pre-multiplied.
_SCALE = 2.0 * SCALE_FACTOR

# Candidate values per tunable. At full size (4096 x 8192 x 8192, bf16) large output tiles keep x and w re-reads
# low (x is streamed once per N block, w once per M block); K takes four steps of 2048 with the defaults.
# Session 35, by `maxkernel estimate`: 2048 x 2048 x 1024 re-reads w twice rather than four times, and
# on v6e it takes 0.623 ms against 0.673 for 1024 x 2048 x 2048 (XLA 0.717); the defaults since (v5e: the kernel table). About 48 MiB of VMEM, as before.
TUNABLES = {
    "block_m": (256, 512, 1024, 2048),
    "block_n": (512, 1024, 2048),
    "block_k": (512, 1024, 2048, 4096),
}

SUBLANES, LANES = 8, 128

# The epilogue walks the accumulator in (EPILOGUE_ROWS, 128) pieces: an inner loop over the 128-lane column chunks
# of a row group carries that group's lane-wise partial sums in registers and stores them once into the output.
# 128 rows carry 16 independent vregs of sums: 0.673 ms on v6e by `maxkernel estimate`, where 32 rows (4 vregs,
# each add waiting on the last) took 0.698 (XLA 0.599).
EPILOGUE_ROWS = 128
EPILOGUE_UNROLL = 4

_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # x[bm, bk] . w[bn, bk]: w stays in torch Linear layout


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes over batch (M), hidden_size (N) and input_size (K); build with `fit`."""

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
                                          ("hidden_size", n, sizes.block_n, LANES),
                                          ("input_size", k, sizes.block_k, LANES)):
            if extent % block:
                raise ValueError(f"block for {dim}={extent} is {block}, which does not divide it")
            if block != extent and block % align:
                raise ValueError(f"block for {dim}={extent} is {block}: must be a multiple of {align} or all of it")
        # The epilogue folds whole 128-lane column chunks.
        if sizes.block_n % LANES:
            raise ValueError(f"block for hidden_size is {sizes.block_n}: must be a multiple of {LANES}")
        return sizes


def _vmem_limit(bs: BlockSizes, in_dtype) -> int:
    """Scoped VMEM: double-buffered x, w and f32 bias blocks, the f32 accumulator and the dot's f32 partial product,
    the double-buffered [block_m, 128] partial sums, with a quarter more for Mosaic's scratch; within [16, 100] MiB."""
    isz = jnp.dtype(in_dtype).itemsize
    tiles = 2 * isz * (bs.block_m * bs.block_k + bs.block_n * bs.block_k) + 2 * 4 * SUBLANES * bs.block_n
    need = tiles + 2 * 4 * bs.block_m * bs.block_n + 2 * 4 * bs.block_m * LANES
    return int(min(max(need * 5 // 4, 16 << 20), 100 << 20))


def _softplus(v):
    # log(1 + e^v) without overflow: max(v, 0) + log1p(e^-|v|), as jax.nn.softplus (logaddexp(v, 0)) computes it.
    return jnp.maximum(v, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(v)))


def _mish(v):
    return v * jnp.tanh(_softplus(v))


def _kernel(x_ref, w_ref, bs_ref, p_ref, acc_ref):
    # x_ref: [bm, bk], w_ref: [bn, bk], bs_ref: [1, bn] f32 (b * _SCALE), acc_ref: [bm, bn] f32,
    # p_ref: [bm, 128] f32, this tile's lane-wise sums of exp(y) over its 128-lane column chunks.
    k, nk = pl.program_id(2), pl.num_programs(2)

    @pl.when(k == 0)
    def _init_acc():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += lax.dot_general(x_ref[...], w_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)

    @pl.when(k == nk - 1)
    def _epilogue():
        block_m, block_n = acc_ref.shape
        rows_per = EPILOGUE_ROWS if block_m % EPILOGUE_ROWS == 0 else block_m

        def _row_group(g, carry):
            rows = pl.ds(pl.multiple_of(g * rows_per, rows_per), rows_per)

            def _chunk(c, s):
                cols = pl.ds(pl.multiple_of(c * LANES, LANES), LANES)
                y = jnp.clip(acc_ref[rows, cols] * _SCALE + bs_ref[:, cols], CLAMP_MIN, CLAMP_MAX)
                return s + jnp.exp(y)

            zero = jnp.zeros((rows_per, LANES), jnp.float32)
            p_ref[rows, :] = lax.fori_loop(0, block_n // LANES, _chunk, zero, unroll=EPILOGUE_UNROLL)
            return carry

        lax.fori_loop(0, block_m // rows_per, _row_group, 0)


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k"))
def workload(
    x: jax.Array,  # [batch_size, input_size]
    w: jax.Array,  # [hidden_size, input_size]
    b: jax.Array,  # [hidden_size]
    *,
    block_m: int = 2048,
    block_n: int = 2048,
    block_k: int = 1024,
) -> jax.Array:  # [batch_size, 1] in x's dtype
    """l * mish(l), l = logsumexp(clip(2 * ((x @ w.T + b) * scale), lo, hi), axis=1); the GEMM and exp-sums in one
    kernel with f32 accumulation and f32 epilogue."""
    (m, k), (n, k_w) = x.shape, w.shape
    if k != k_w:
        raise ValueError(f"input_size differs: x is [batch_size={m}, {k}], w is [hidden_size={n}, {k_w}]")
    if b.shape != (n,):
        raise ValueError(f"b has shape {b.shape}, expected (hidden_size={n},)")
    bs = BlockSizes.fit(m, n, k, block_m=block_m, block_n=block_n, block_k=block_k)
    grid = (m // bs.block_m, n // bs.block_n, k // bs.block_k)
    out_dtype = x.dtype
    size = jnp.dtype(x.dtype).itemsize
    # b * 4 in f32 (exact): the epilogue evaluates acc * 4 + b * 4, which rounds exactly as 4 * (acc + b).
    b_scaled = (b.astype(jnp.float32) * _SCALE).reshape(1, n)
    cost = pl.CostEstimate(
        flops=2 * m * n * k + 5 * m * n,
        transcendentals=m * n,
        bytes_accessed=size * (m * k * grid[1] + n * k * grid[0]) + 4 * n * grid[0] + 4 * m * grid[1] * LANES,
    )
    partial_sums = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((m, grid[1] * LANES), jnp.float32),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bs.block_n, bs.block_k), lambda i, j, kk: (j, kk)),
            pl.BlockSpec((1, bs.block_n), lambda i, j, kk: (0, j)),
        ],
        # One [bm, 128] block of partial sums per output tile, resident across K and written once.
        out_specs=pl.BlockSpec((bs.block_m, LANES), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bs.block_m, bs.block_n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=_vmem_limit(bs, x.dtype)),
        cost_estimate=cost,
        interpret=False,
    )(x, w, b_scaled)
    # O(batch) combine: each row's LogSumExp from its partial sums of exp, then lse * mish(lse), in f32.
    lse = jnp.log(jnp.sum(partial_sums, axis=1, keepdims=True))
    return (lse * _mish(lse)).astype(out_dtype)
