"""Pallas TPU kernel for 19k_Matmul_Subtract_Multiply_ReLU: tiled x @ w.T with relu((y + b - c) * m) fused as an
epilogue on the f32 accumulator."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# The task's constants (CONFIG["subtract_value"], CONFIG["multiply_value"]).
SUBTRACT_VALUE = 2.0
MULTIPLY_VALUE = 1.5

# Candidate values per tunable. At full size (4096 x 8192 x 8192, bf16) the defaults 1024 x 2048 x 2048 keep the
# output tiles large, so x and w are re-read only four times each and the kernel stays compute-bound on v6e, and
# K takes four steps. `maxkernel estimate` put them at 2.87 ms on v5e and 0.657 ms on v6e (XLA: 2.79 / 0.599);
# 1024 x 1024 x 4096 re-reads x twice as often and is memory-bound on v6e (2.87 / 0.697 ms). 1024 x 2048 x 4096
# compiles (about 69 MiB of VMEM) but the estimator cannot price it: under libtpu's static-profile dump the
# program reserves the whole 80 MiB scoped limit a second time as HLO temp (80 + 69 MiB > 128 MiB) when the
# bias is an input (without the bias, or without the dump, it fits). These tiles need about 41 MiB, so the
# kernel asks for a scoped limit sized from them (v5e's default is 16 MiB, v6e's 32); not every combination
# compiles, and an autotuner must treat a compile failure as a rejected candidate.
# Session 35, by `maxkernel estimate`: 2048 x 2048 x 1024 re-reads w twice rather than four times, and
# on v6e it takes 0.627 ms against 0.649 for 1024 x 2048 x 2048 (XLA 0.639); the defaults since (v5e: the kernel table). About 48 MiB of VMEM, as before.
TUNABLES = {
    "block_m": (256, 512, 1024, 2048),
    "block_n": (512, 1024, 2048),
    "block_k": (512, 1024, 2048, 4096),
}

# TPU vregs are (8 sublanes, 128 lanes): a block's last two dims must be multiples of these or the whole dim.
SUBLANES, LANES = 8, 128

# x[bm, bk] . w[bn, bk] over their last dims: w stays in torch Linear layout and the MXU takes it transposed.
_CONTRACT_LAST = (((1,), (1,)), ((), ()))


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
    """Scoped VMEM for these tiles: double-buffered x, w and output blocks plus the f32 accumulator, with a quarter
    more for Mosaic's own scratch; never below the 16 MiB default, never above 100 MiB (v5e and v6e have 128)."""
    isz, osz = jnp.dtype(in_dtype).itemsize, jnp.dtype(out_dtype).itemsize
    tiles = 2 * isz * (bs.block_m * bs.block_k + bs.block_n * bs.block_k) + 2 * osz * bs.block_m * bs.block_n
    need = tiles + 4 * bs.block_m * bs.block_n
    return int(min(max(need * 5 // 4, 16 << 20), 100 << 20))


def _kernel(x_ref, w_ref, b_ref, o_ref, acc_ref):
    # x_ref: [block_m, block_k], w_ref: [block_n, block_k], b_ref: [1, block_n], o_ref / acc_ref: [block_m, block_n]
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += lax.dot_general(x_ref[...], w_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)

    # The epilogue runs once per output tile, on the f32 accumulator, before the single store.
    @pl.when(k == pl.num_programs(2) - 1)
    def _epilogue():
        y = (acc_ref[...] + b_ref[...].astype(jnp.float32) - SUBTRACT_VALUE) * MULTIPLY_VALUE
        o_ref[...] = jnp.maximum(y, 0.0).astype(o_ref.dtype)


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
    """relu((x @ w.T + b - subtract_value) * multiply_value) in one kernel: f32 accumulation over K."""
    (m, k), (n, k_w) = x.shape, w.shape
    if k != k_w:
        raise ValueError(f"in_features differ: x is [batch_size={m}, in_features={k}], w is [{n}, in_features={k_w}]")
    if b.shape != (n,):
        raise ValueError(f"bias has shape {b.shape}, expected (out_features={n},)")
    bs = BlockSizes.fit(m, n, k, block_m=block_m, block_n=block_n, block_k=block_k)
    grid = (m // bs.block_m, n // bs.block_n, k // bs.block_k)
    out_dtype = x.dtype
    size = jnp.dtype(x.dtype).itemsize
    cost = pl.CostEstimate(
        flops=2 * m * n * k + 4 * m * n,
        transcendentals=0,
        # x is streamed once per column of output tiles, w once per row of them.
        bytes_accessed=size * (m * k * grid[1] + n * k * grid[0])
        + jnp.dtype(out_dtype).itemsize * m * n + n * jnp.dtype(b.dtype).itemsize,
    )
    return pl.pallas_call(
        _kernel,
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
