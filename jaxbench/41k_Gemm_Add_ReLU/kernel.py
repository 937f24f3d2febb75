"""Reference Pallas TPU kernel for 41k_Gemm_Add_ReLU: tiled x @ w.T with the bias add and ReLU fused as an epilogue."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# At full size (4096 x 8192 x 8192, bf16) the defaults 1024 x 2048 x 2048 keep the output tiles large, so x and w
# are re-read only four times each and the kernel stays compute-bound on v6e too (the first defaults, 512 x 1024 x
# 1024 inside v5e's 16 MiB scoped VMEM, re-read them twice as often: memory-bound on v6e, 1.02 ms against XLA's
# 0.599 by `maxkernel estimate`). These tiles need about 41 MiB, so the kernel asks for a scoped limit sized from
# them. Not every combination compiles (1024 x 1024 x 1024 without the limit fails with E1001
# CompileTimeScopedVmemOom on v5e): the autotuner must treat a compile failure as a rejected candidate.
TUNABLES = {
    "block_m": (128, 256, 512, 1024),
    "block_n": (128, 256, 512, 1024, 2048),
    "block_k": (128, 256, 512, 1024, 2048),
}

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


def _gemm_add_relu_kernel(x_ref, w_ref, b_ref, o_ref, acc_ref):
    # x_ref: [block_m, block_k], w_ref: [block_n, block_k], b_ref: [1, block_n], o_ref / acc_ref: [block_m, block_n]
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += lax.dot_general(x_ref[...], w_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)

    # The epilogue runs once per output tile, on the f32 accumulator, so the bias add is not rounded first.
    @pl.when(k == pl.num_programs(2) - 1)
    def _epilogue():
        y = acc_ref[...] + b_ref[...].astype(jnp.float32)
        o_ref[...] = jnp.maximum(y, 0.0).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k"))
def workload(
    x: jax.Array,  # [batch_size, in_features]
    w: jax.Array,  # [out_features, in_features]
    bias: jax.Array,  # [out_features]
    *,
    block_m: int = 1024,
    block_n: int = 2048,
    block_k: int = 2048,
) -> jax.Array:  # [batch_size, out_features] in x's dtype
    """relu(x @ w.T + bias) in one kernel: f32 accumulation over K, epilogue on the last K step."""
    (m, k), (n, k_w) = x.shape, w.shape
    if k != k_w:
        raise ValueError(f"in_features differ: x is [batch_size={m}, in_features={k}], w is [{n}, in_features={k_w}]")
    if bias.shape != (n,):
        raise ValueError(f"bias has shape {bias.shape}, expected (out_features={n},)")
    bs = BlockSizes.fit(m, n, k, block_m=block_m, block_n=block_n, block_k=block_k)
    grid = (m // bs.block_m, n // bs.block_n, k // bs.block_k)
    size = jnp.dtype(x.dtype).itemsize
    cost = pl.CostEstimate(
        flops=2 * m * n * k + 2 * m * n,
        transcendentals=0,
        # x is streamed once per column of output tiles, w once per row of them.
        bytes_accessed=size * (m * k * grid[1] + n * k * grid[0] + m * n) + n * jnp.dtype(bias.dtype).itemsize,
    )
    return pl.pallas_call(
        _gemm_add_relu_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bs.block_n, bs.block_k), lambda i, j, kk: (j, kk)),
            pl.BlockSpec((1, bs.block_n), lambda i, j, kk: (0, j)),
        ],
        out_specs=pl.BlockSpec((bs.block_m, bs.block_n), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bs.block_m, bs.block_n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=_vmem_limit(bs, x.dtype, x.dtype)),
        cost_estimate=cost,
        interpret=False,
    )(x, w, bias.reshape(1, n))
