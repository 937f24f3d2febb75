"""Reference Pallas TPU kernel for 8p_GEMM: a tiled a @ b with an f32 VMEM accumulator over the K grid axis."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Candidate values per tunable, for the autotuner. The defaults (1024 x 2048 x 4096) were picked by `maxkernel
# autotune` on its TPU estimate: on a v6e the 512 x 1024 tiles re-read x and w so often that the kernel is
# memory-bound (7.2 ms against XLA's 4.2), and each K step re-reads and re-writes the f32 accumulator, so a longer
# block_k cuts that overhead (4.53 -> 4.43 -> 4.38 ms on v6e for block_k 1024 -> 2048 -> 4096). These tiles need
# about 64 MiB of VMEM, so the kernel asks for a scoped limit to match (v5e and v6e have 128 MiB); not every
# combination compiles, and the autotuner treats a compile failure as a rejected candidate.
TUNABLES = {
    "block_m": (256, 512, 1024, 2048),
    "block_n": (512, 1024, 2048),
    "block_k": (512, 1024, 2048, 4096),
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


def _vmem_limit(bs: "BlockSizes", in_dtype, out_dtype) -> int:
    """Scoped VMEM for these tiles: double-buffered a, b and output blocks plus the f32 accumulator, with a quarter
    more for Mosaic's own scratch; never below the 16 MiB default, never above 100 MiB (v5e and v6e have 128)."""
    isz, osz = jnp.dtype(in_dtype).itemsize, jnp.dtype(out_dtype).itemsize
    tiles = 2 * isz * (bs.block_m * bs.block_k + bs.block_k * bs.block_n) + 2 * osz * bs.block_m * bs.block_n
    need = tiles + 4 * bs.block_m * bs.block_n
    return int(min(max(need * 5 // 4, 16 << 20), 100 << 20))


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
    block_m: int = 1024,
    block_n: int = 2048,
    block_k: int = 4096,
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
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=_vmem_limit(bs, a.dtype, out_dtype)),
        cost_estimate=cost,
        interpret=False,
    )(a, b)
