"""Pallas TPU kernel for 32k_Gemm_Sigmoid_LogSumExp: both Linear layers in one kernel. Each grid step takes a row
block of x and a block of hidden units, computes h = sigmoid(x @ w1.T + b1) for them in VMEM (cast to x's dtype, as
the baseline does), and accumulates h @ w2.T into the row block's f32 [block_m, output_size] logits; at the last
hidden block the logits get b2 and a row LogSumExp. Neither the [batch, hidden] activation nor the
[batch, output] logits reach HBM."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Candidate values per tunable. At full size (16384 x 2048 -> 4096 -> 1024, bf16) w1 and w2 (24 MiB together) are
# re-read once per row block, so block_m sets the weight traffic; block_h sets the hidden slice computed per step,
# and with it how often the f32 [block_m, output_size] logits are read, added to and stored (hidden / block_h times
# per row block). The defaults 1024 x 1024 need about 53 MiB of scoped VMEM.
TUNABLES = {
    "block_m": (256, 512, 1024, 2048),
    "block_h": (256, 512, 1024, 2048),
}

SUBLANES, LANES = 8, 128

_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # a[m, k] . b[n, k]: weights stay in torch Linear layout


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes over batch (M) and hidden_size (H); input_size and output_size are taken whole."""

    block_m: int
    block_h: int

    def __post_init__(self):
        for name, value in dataclasses.asdict(self).items():
            if value <= 0:
                raise ValueError(f"{name}={value} must be positive")

    @classmethod
    def fit(cls, m: int, h: int, *, block_m: int, block_h: int) -> "BlockSizes":
        """Blocks clamped to the array dims (so one setting serves smoke and full size), then validated."""
        sizes = cls(min(block_m, m), min(block_h, h))
        # block_h is the lane dim of w2's block and of the h tile, the sublane dim of w1's block.
        for dim, extent, block, align in (("batch_size", m, sizes.block_m, SUBLANES),
                                          ("hidden_size", h, sizes.block_h, LANES)):
            if extent % block:
                raise ValueError(f"block for {dim}={extent} is {block}, which does not divide it")
            if block != extent and block % align:
                raise ValueError(f"block for {dim}={extent} is {block}: must be a multiple of {align} or all of it")
        return sizes


def _vmem_limit(bs: BlockSizes, i: int, o: int, in_dtype) -> int:
    """Scoped VMEM: double-buffered x, w1, w2 and f32 bias blocks; the f32 logits accumulator and the second dot's
    partial product; the f32 hidden tile and its cast; the LogSumExp's f32 temporaries at the last step; with a
    quarter more for Mosaic's scratch; within [16, 100] MiB."""
    isz = jnp.dtype(in_dtype).itemsize
    bm, bh = bs.block_m, bs.block_h
    tiles = 2 * isz * (bm * i + bh * i + o * bh) + 2 * 4 * SUBLANES * (bh + o)
    need = tiles + 2 * 4 * bm * o + (4 + isz) * bm * bh + 2 * 4 * bm * o
    return int(min(max(need * 5 // 4, 16 << 20), 100 << 20))


def _kernel(x_ref, w1_ref, b1_ref, w2_ref, b2_ref, o_ref, z_ref):
    # x_ref: [bm, I], w1_ref: [bh, I], b1_ref: [1, bh] f32 (b1 / 2), w2_ref: [O, bh], b2_ref: [1, O] f32,
    # o_ref: [bm, 1], z_ref: [bm, O] f32 logits accumulated over the hidden blocks.
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init():
        z_ref[...] = jnp.zeros_like(z_ref)

    a = lax.dot_general(x_ref[...], w1_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)
    # sigmoid(a + b1) = (1 + tanh((a + b1) / 2)) / 2: one EUP op per element; cast to x's dtype as the baseline.
    h = (0.5 * jnp.tanh(a * 0.5 + b1_ref[...]) + 0.5).astype(w2_ref.dtype)
    z_ref[...] += lax.dot_general(h, w2_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)

    @pl.when(j == pl.num_programs(1) - 1)
    def _logsumexp():
        z = z_ref[...] + b2_ref[...]
        m = jnp.max(z, axis=1, keepdims=True)
        lse = m + jnp.log(jnp.sum(jnp.exp(z - m), axis=1, keepdims=True))
        o_ref[...] = lse.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_m", "block_h"))
def workload(
    x: jax.Array,  # [batch_size, input_size]
    w1: jax.Array,  # [hidden_size, input_size]
    b1: jax.Array,  # [hidden_size]
    w2: jax.Array,  # [output_size, hidden_size]
    b2: jax.Array,  # [output_size]
    *,
    block_m: int = 1024,
    block_h: int = 1024,
) -> jax.Array:  # [batch_size] in x's dtype
    """logsumexp(sigmoid(x @ w1.T + b1).astype(x.dtype) @ w2.T + b2, axis=1) in one kernel, f32 accumulation."""
    (m, i), (h, i_w), (o, h_w) = x.shape, w1.shape, w2.shape
    if i != i_w:
        raise ValueError(f"input_size differs: x is [batch_size={m}, {i}], w1 is [hidden_size={h}, {i_w}]")
    if h != h_w:
        raise ValueError(f"hidden_size differs: w1 is [{h}, input_size={i}], w2 is [output_size={o}, {h_w}]")
    if b1.shape != (h,) or b2.shape != (o,):
        raise ValueError(f"biases have shapes {b1.shape}, {b2.shape}, expected ({h},), ({o},)")
    bs = BlockSizes.fit(m, h, block_m=block_m, block_h=block_h)
    grid = (m // bs.block_m, h // bs.block_h)
    size = jnp.dtype(x.dtype).itemsize
    # b1 / 2 in f32 (exact): the kernel evaluates tanh(a / 2 + b1 / 2).
    b1_half = (b1.astype(jnp.float32) * 0.5).reshape(1, h)
    cost = pl.CostEstimate(
        flops=2 * m * h * (i + o) + 5 * m * h + 5 * m * o,
        transcendentals=m * h + m * o,
        # x once; w1, w2 and the biases once per row block.
        bytes_accessed=size * (m * i + grid[0] * (h * i + o * h)) + 4 * grid[0] * (h + o) + size * m,
    )
    out = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((m, 1), x.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bs.block_m, i), lambda r, c: (r, 0)),  # resident across the hidden blocks
            pl.BlockSpec((bs.block_h, i), lambda r, c: (c, 0)),
            pl.BlockSpec((1, bs.block_h), lambda r, c: (0, c)),
            pl.BlockSpec((o, bs.block_h), lambda r, c: (0, c)),
            pl.BlockSpec((1, o), lambda r, c: (0, 0)),
        ],
        # The [bm, 1] output block keeps its index across the hidden axis, so it is written once.
        out_specs=pl.BlockSpec((bs.block_m, 1), lambda r, c: (r, 0)),
        scratch_shapes=[pltpu.VMEM((bs.block_m, o), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"),
                                             vmem_limit_bytes=_vmem_limit(bs, i, o, x.dtype)),
        cost_estimate=cost,
        interpret=False,
    )(x, w1, b1_half, w2, b2.astype(jnp.float32).reshape(1, o))
    return out.reshape(m)
