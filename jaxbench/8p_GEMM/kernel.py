"""Reference Pallas TPU kernel for 8p_GEMM: a tiled a @ b with an f32 VMEM accumulator over the K grid axis."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Candidate values per tunable, for the autotuner. At full size (8192 x 8192 x 28672, bf16) the defaults
# keep the double-buffered tiles plus the accumulator near 10 MiB, inside v5e's 16 MiB scoped VMEM.
# Not every combination fits (1024 x 1024 x 1024 fails with E1001 CompileTimeScopedVmemOom on v5e): the
# autotuner must treat a compile failure as a rejected candidate.
TUNABLES = {
    "block_m": (128, 256, 512, 1024),
    "block_n": (128, 256, 512, 1024, 2048),
    "block_k": (128, 256, 512, 1024, 2048),
}

# TPU vregs are (8 sublanes, 128 lanes): a block's last two dims must be multiples of these or the whole dim.
SUBLANES, LANES = 8, 128


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
        """Blocks clamped to the array dims (so one setting serves smoke and full size), then validated."""
        sizes = cls(min(block_m, m), min(block_n, n), min(block_k, k))
        for dim, extent, block, align in (("M", m, sizes.block_m, SUBLANES),
                                          ("N", n, sizes.block_n, LANES),
                                          ("K", k, sizes.block_k, LANES)):
            if extent % block:
                raise ValueError(f"block for {dim}={extent} is {block}, which does not divide it")
            if block != extent and block % align:
                raise ValueError(f"block for {dim}={extent} is {block}: must be a multiple of {align} or all of {dim}")
        return sizes


def _matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    # a_ref: [block_m, block_k], b_ref: [block_k, block_n], o_ref / acc_ref: [block_m, block_n]
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    # The output block stays resident across the K axis, so it is stored once, after the last partial sum.
    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k"))
def workload(
    a: jax.Array,  # [M, K]
    b: jax.Array,  # [K, N]
    *,
    block_m: int = 512,
    block_n: int = 1024,
    block_k: int = 1024,
) -> jax.Array:  # [M, N] in a's dtype
    """a @ b with f32 accumulation, tiled (block_m, block_n) over the output and block_k over K."""
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b:
        raise ValueError(f"contracting dims differ: a is [M={m}, K={k}], b is [K={k_b}, N={n}]")
    bs = BlockSizes.fit(m, n, k, block_m=block_m, block_n=block_n, block_k=block_k)
    grid = (m // bs.block_m, n // bs.block_n, k // bs.block_k)
    out_dtype = a.dtype
    size = jnp.dtype(a.dtype).itemsize
    # HBM traffic as tiled: a is streamed once per column of output blocks, b once per row of them.
    cost = pl.CostEstimate(
        flops=2 * m * n * k,
        transcendentals=0,
        bytes_accessed=size * (m * k * grid[1] + k * n * grid[0]) + jnp.dtype(out_dtype).itemsize * m * n,
    )
    return pl.pallas_call(
        _matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bs.block_k, bs.block_n), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((bs.block_m, bs.block_n), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bs.block_m, bs.block_n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        cost_estimate=cost,
        interpret=False,
    )(a, b)
