"""Pallas TPU kernel for rw_w8a8_int8_matmul: per-token int8 quantization of x, then a tiled int8 x int8 matmul
with an int32 VMEM accumulator and the dequantizing epilogue fused into its last K step.

Two calls. The first reads each row of x once, whole (its scale needs the row's max over all of K), and writes its
int8 codes and f32 scale: a quarter of the matmul's x traffic afterwards is int8, not bf16. The second is a GEMM
over (M, N, K) tiles on the MXU's int8 path, exact in int32, and scales each output tile by its rows' and columns'
scales before the one store. Decode (16 tokens) is all weight streaming: the row block is every token, so the
int8 weight is read exactly once.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Candidate values per tunable, for the autotuner. Prefill (8192 x 8192 x 28672) is compute-bound on the int8
# MXU: large output tiles cut the re-reads of x and w; block_k long enough that the int32 accumulator's
# read-modify-write per K step stays small beside the matmul.
TUNABLES = {
    "block_m": (256, 512, 1024, 2048),
    "block_n": (512, 1024, 2048),
    "block_k": (512, 1024, 2048, 4096),
    "quant_rows": (32, 64, 128, 256),
}

QMAX = 127.0  # the task's symmetric int8 range: -127..127
MIN_SCALE = 1e-10  # the scale of an all-zero row
# Block alignment: (sublanes, lanes) of a vreg; an int8 array packs 32 rows per sublane tile.
SUBLANES, LANES, INT8_SUBLANES = 8, 128, 32


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes of the (M, N, K) matmul and the quantization pass's rows; build with `fit`."""

    block_m: int
    block_n: int
    block_k: int
    quant_rows: int

    def __post_init__(self):
        for name, value in dataclasses.asdict(self).items():
            if value <= 0:
                raise ValueError(f"{name}={value} must be positive")

    @classmethod
    def fit(cls, m: int, n: int, k: int, **blocks: int) -> "BlockSizes":
        """Blocks clamped to the array dims (one setting serves smoke, prefill and decode), then checked."""
        sizes = cls(min(blocks["block_m"], m), min(blocks["block_n"], n), min(blocks["block_k"], k),
                    min(blocks["quant_rows"], m))
        for dim, extent, block, align in (("M", m, sizes.block_m, INT8_SUBLANES),
                                          ("N", n, sizes.block_n, LANES),
                                          ("K", k, sizes.block_k, LANES),
                                          ("M (quantization rows)", m, sizes.quant_rows, INT8_SUBLANES)):
            if extent % block:
                raise ValueError(f"block for {dim}={extent} is {block}, which does not divide it")
            if block != extent and block % align:
                raise ValueError(f"block for {dim}={extent} is {block}: must be a multiple of {align} or all of {dim}")
        return sizes


def _quantize_kernel(x_ref, q_ref, s_ref):
    # x_ref: [rows, K] in x's dtype, q_ref: [rows, K] int8, s_ref: [rows, 1] f32
    x = x_ref[...].astype(jnp.float32)
    scale = jnp.maximum(jnp.max(jnp.abs(x), axis=1, keepdims=True) / QMAX, MIN_SCALE)
    # A divide, not a multiply by the reciprocal: the codes are the task's round-half-to-even(x / scale).
    q_ref[...] = jnp.clip(jnp.round(x / scale), -QMAX, QMAX).astype(jnp.int8)
    s_ref[...] = scale


def _int8_matmul_kernel(xq_ref, w_ref, xs_ref, ws_ref, o_ref, acc_ref):
    # xq_ref: [bm, bk] int8, w_ref: [bk, bn] int8, xs_ref: [bm, 1] f32, ws_ref: [1, bn] f32,
    # o_ref: [bm, bn] in x's dtype, acc_ref: [bm, bn] int32
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(xq_ref[...], w_ref[...], preferred_element_type=jnp.int32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():  # the task's order: acc * x_scale, then * w_scale, in f32
        o_ref[...] = (acc_ref[...].astype(jnp.float32) * xs_ref[...] * ws_ref[...]).astype(o_ref.dtype)


def _vmem_limit(bs: BlockSizes, k: int, x_size: int) -> int:
    """Scoped VMEM for the larger of the two calls, double-buffered, with a quarter more for Mosaic's scratch;
    never below the 16 MiB default, never above 100 MiB (v5e and v6e have 128)."""
    quant = 2 * bs.quant_rows * k * (x_size + 1) + 3 * 4 * bs.quant_rows * k  # in, out, f32 temporaries
    tiles = 2 * (bs.block_m * bs.block_k + bs.block_k * bs.block_n) + 2 * x_size * bs.block_m * bs.block_n
    need = max(quant, tiles + 4 * bs.block_m * bs.block_n)
    return int(min(max(need * 5 // 4, 16 << 20), 100 << 20))


def _quantize(x: jax.Array, bs: BlockSizes, params) -> tuple[jax.Array, jax.Array]:
    """x's int8 codes [M, K] and per-row f32 scales [M, 1], one pass over x."""
    m, k = x.shape
    return pl.pallas_call(
        _quantize_kernel,
        out_shape=(jax.ShapeDtypeStruct((m, k), jnp.int8), jax.ShapeDtypeStruct((m, 1), jnp.float32)),
        grid=(m // bs.quant_rows,),
        in_specs=[pl.BlockSpec((bs.quant_rows, k), lambda i: (i, 0))],
        out_specs=(pl.BlockSpec((bs.quant_rows, k), lambda i: (i, 0)),
                   pl.BlockSpec((bs.quant_rows, 1), lambda i: (i, 0))),
        compiler_params=params(("parallel",)),
        cost_estimate=pl.CostEstimate(flops=4 * m * k, transcendentals=0,
                                      bytes_accessed=m * k * (x.dtype.itemsize + 1) + 4 * m),
    )(x)


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k", "quant_rows"))
def workload(
    x: jax.Array,  # [M, K] activations (bf16)
    w: jax.Array,  # [K, N] int8 weight codes
    w_scale: jax.Array,  # [1, N] f32 per-output-channel scales
    *,
    block_m: int = 1024,
    block_n: int = 2048,
    block_k: int = 2048,
    quant_rows: int = 128,
) -> jax.Array:  # [M, N] in x's dtype
    """x quantized per token to int8, times w exactly in int32, dequantized by x's and w's scales."""
    (m, k), (k_w, n) = x.shape, w.shape
    if k != k_w:
        raise ValueError(f"contracting dims differ: x is [M={m}, K={k}], w is [K={k_w}, N={n}]")
    if w.dtype != jnp.int8 or w_scale.shape != (1, n):
        raise ValueError(f"w must be int8 [K, N] with w_scale [1, N={n}]; got {w.dtype} and {w_scale.shape}")
    bs = BlockSizes.fit(m, n, k, block_m=block_m, block_n=block_n, block_k=block_k, quant_rows=quant_rows)
    limit = _vmem_limit(bs, k, x.dtype.itemsize)

    def params(semantics):
        return pltpu.CompilerParams(dimension_semantics=semantics, vmem_limit_bytes=limit)

    xq, x_scale = _quantize(x, bs, params)
    grid = (m // bs.block_m, n // bs.block_n, k // bs.block_k)
    cost = pl.CostEstimate(  # x streamed once per column of output tiles, w once per row of them
        flops=2 * m * n * k + 2 * m * n, transcendentals=0,
        bytes_accessed=m * k * grid[1] + k * n * grid[0] + x.dtype.itemsize * m * n + 4 * (m + n))
    return pl.pallas_call(
        _int8_matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bs.block_k, bs.block_n), lambda i, j, kk: (kk, j)),
            pl.BlockSpec((bs.block_m, 1), lambda i, j, kk: (i, 0)),
            pl.BlockSpec((1, bs.block_n), lambda i, j, kk: (0, j)),
        ],
        out_specs=pl.BlockSpec((bs.block_m, bs.block_n), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bs.block_m, bs.block_n), jnp.int32)],
        compiler_params=params(("parallel", "parallel", "arbitrary")),
        cost_estimate=cost,
    )(xq, w, x_scale, w_scale)
