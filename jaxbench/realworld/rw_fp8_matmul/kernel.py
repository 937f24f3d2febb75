"""Pallas TPU kernel for rw_fp8_matmul: an fp8 (e4m3) x fp8 matmul tiled over (M, N, K), each tile widened to bf16
in VMEM for the MXU, f32 accumulation, and the per-row and per-column scales applied in the last K step's store.

TPU v5e and v6e have no fp8 MXU path: the operands have to be widened somewhere. Widening in VMEM keeps HBM traffic
at one byte per operand element (e4m3 values are exact in bf16: 3 mantissa bits, exponents well inside bf16's), so
the kernel reads half the bytes of a bf16 GEMM and writes no widened copy. Decode (16 tokens) streams the weight
once: the row block is every token.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Candidate values per tunable, for the autotuner. K = 7168 = 7 x 1024 and N = 18432 = 9 x 2048 at full size: the
# blocks must divide them. Large output tiles cut the re-reads of x and w; the widened bf16 copies of both tiles
# live in VMEM beside the f32 accumulator.
TUNABLES = {
    "block_m": (256, 512, 1024, 2048),
    "block_n": (512, 1024, 2048),
    "block_k": (512, 1024, 3584, 7168),
}

# Block alignment: (sublanes, lanes) of a vreg; an 8-bit array packs 32 rows per sublane tile.
LANES, BYTE_SUBLANES = 128, 32


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes of the (M, N, K) iteration space; build with `fit` so they are clamped and checked."""

    block_m: int
    block_n: int
    block_k: int

    def __post_init__(self):
        for name, value in dataclasses.asdict(self).items():
            if value <= 0:
                raise ValueError(f"{name}={value} must be positive")

    @classmethod
    def fit(cls, m: int, n: int, k: int, *, block_m: int, block_n: int, block_k: int) -> "BlockSizes":
        """Blocks clamped to the array dims (one setting serves smoke, prefill and decode), then validated."""
        sizes = cls(min(block_m, m), min(block_n, n), min(block_k, k))
        for dim, extent, block, align in (("M", m, sizes.block_m, BYTE_SUBLANES),
                                          ("N", n, sizes.block_n, LANES),
                                          ("K", k, sizes.block_k, LANES)):
            if extent % block:
                raise ValueError(f"block for {dim}={extent} is {block}, which does not divide it")
            if block != extent and block % align:
                raise ValueError(f"block for {dim}={extent} is {block}: must be a multiple of {align} or all of {dim}")
        return sizes


def _fp8_matmul_kernel(x_ref, w_ref, xs_ref, ws_ref, o_ref, acc_ref):
    # x_ref: [bm, bk] fp8, w_ref: [bk, bn] fp8, xs_ref: [bm, 1] f32, ws_ref: [1, bn] f32,
    # o_ref: [bm, bn] bf16, acc_ref: [bm, bn] f32
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    # Widened exactly to bf16: the products are exact in f32 and only the summation order differs from the task's.
    x = x_ref[...].astype(jnp.bfloat16)
    w = w_ref[...].astype(jnp.bfloat16)
    acc_ref[...] += jnp.dot(x, w, preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():  # the task's order: acc * x_scale, then * w_scale, in f32
        o_ref[...] = (acc_ref[...] * xs_ref[...] * ws_ref[...]).astype(o_ref.dtype)


def _vmem_limit(bs: BlockSizes, in_size: int) -> int:
    """Scoped VMEM: double-buffered fp8 tiles and bf16 output, their widened bf16 copies and the f32 accumulator,
    with a quarter more for Mosaic's scratch; never below the 16 MiB default, never above 100 MiB."""
    tiles = bs.block_m * bs.block_k + bs.block_k * bs.block_n
    need = (2 * in_size + 2) * tiles + (2 * 2 + 4) * bs.block_m * bs.block_n
    return int(min(max(need * 5 // 4, 16 << 20), 100 << 20))


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k"))
def workload(
    x: jax.Array,  # [M, K] float8_e4m3fn activations
    x_scale: jax.Array,  # [M, 1] f32 per-row scales
    w: jax.Array,  # [K, N] float8_e4m3fn weight
    w_scale: jax.Array,  # [1, N] f32 per-column scales
    *,
    block_m: int = 1024,
    block_n: int = 2048,
    block_k: int = 1024,
) -> jax.Array:  # [M, N] bf16
    """(x @ w) in f32, times x_scale per row and w_scale per column, in bf16."""
    (m, k), (k_w, n) = x.shape, w.shape
    if k != k_w:
        raise ValueError(f"contracting dims differ: x is [M={m}, K={k}], w is [K={k_w}, N={n}]")
    if x_scale.shape != (m, 1) or w_scale.shape != (1, n):
        raise ValueError(f"scales must be x_scale [M={m}, 1] and w_scale [1, N={n}]; got {x_scale.shape} and "
                         f"{w_scale.shape}")
    bs = BlockSizes.fit(m, n, k, block_m=block_m, block_n=block_n, block_k=block_k)
    grid = (m // bs.block_m, n // bs.block_n, k // bs.block_k)
    size = x.dtype.itemsize
    cost = pl.CostEstimate(  # x streamed once per column of output tiles, w once per row of them
        flops=2 * m * n * k + 2 * m * n, transcendentals=0,
        bytes_accessed=size * (m * k * grid[1] + k * n * grid[0]) + 2 * m * n + 4 * (m + n))
    return pl.pallas_call(
        _fp8_matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.bfloat16),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bs.block_k, bs.block_n), lambda i, j, kk: (kk, j)),
            pl.BlockSpec((bs.block_m, 1), lambda i, j, kk: (i, 0)),
            pl.BlockSpec((1, bs.block_n), lambda i, j, kk: (0, j)),
        ],
        out_specs=pl.BlockSpec((bs.block_m, bs.block_n), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bs.block_m, bs.block_n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=_vmem_limit(bs, size)),
        cost_estimate=cost,
    )(x, w, x_scale, w_scale)
