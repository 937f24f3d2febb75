"""Pallas TPU kernel for 9p_SwiGLU_MLP: gate and up GEMMs fused in one kernel with the silu * up epilogue in VMEM
(the hidden activations leave it once, in bf16), then a tiled down-projection GEMM."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Pass 1 walks (token block, mlp block, emb block): one x tile feeds two MXU products, gate and up, each into its own
# f32 accumulator; at the last emb step silu(gate) * up is formed in row pieces and written once as bf16, so the two
# [tokens, mlp_dim] f32 products XLA materialises never reach HBM. Pass 2 is the down projection, tiled like 8p_GEMM.
# At 1024-row blocks both passes re-read their weights tokens / 1024 times, which keeps them compute-bound on v5e
# and v6e; the tiles need more than the 16 MiB scoped default, so each call asks for a limit sized from its tiles.
TUNABLES = {
    "block_m": (256, 512, 1024, 2048),
    "block_f": (512, 1024, 2048),
    "block_e": (512, 1024, 2048, 4096),
    "down_block_n": (512, 1024, 2048),
    "down_block_k": (1024, 2048, 4096),
}

ROW_ALIGN, LANES = 16, 128  # bf16 rows pack 16 to a vreg; lanes are 128 wide
EPILOGUE_ROWS = 128  # rows of the f32 accumulators the epilogue takes at a time


def _fit(extent: int, want: int, align: int) -> int:
    """The largest block <= want that divides extent and is a multiple of align; all of extent when it is small or
    has no such divisor. The same rule at every size, so one setting serves the smoke, check and full sizes."""
    if extent <= want:
        return extent
    block = (want // align) * align
    while block >= align:
        if extent % block == 0:
            return block
        block -= align
    return extent


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    block_m: int  # tokens per block (both passes)
    block_f: int  # mlp_dim columns per pass-1 block
    block_e: int  # emb_dim contraction per pass-1 step
    down_block_n: int  # emb_dim columns per pass-2 block
    down_block_k: int  # mlp_dim contraction per pass-2 step

    @classmethod
    def fit(cls, tokens: int, emb: int, mlp: int, **want: int) -> "BlockSizes":
        for name, value in want.items():
            if value <= 0:
                raise ValueError(f"{name}={value} must be positive")
        return cls(block_m=_fit(tokens, want["block_m"], ROW_ALIGN),
                   block_f=_fit(mlp, want["block_f"], LANES),
                   block_e=_fit(emb, want["block_e"], LANES),
                   down_block_n=_fit(emb, want["down_block_n"], LANES),
                   down_block_k=_fit(mlp, want["down_block_k"], LANES))


def _vmem_limit(*block_bytes: int) -> int:
    """Scoped VMEM for blocks and scratch of `block_bytes` (double-buffered ones passed twice), a quarter more for
    Mosaic's own scratch; never below the 16 MiB default, never above 100 MiB (v5e and v6e have 128)."""
    return int(min(max(sum(block_bytes) * 5 // 4, 16 << 20), 100 << 20))


def _gate_up_kernel(x_ref, wg_ref, wu_ref, h_ref, gate_acc, up_acc, *, piece):
    # x_ref: [bm, be], wg_ref / wu_ref: [be, bf], h_ref: [bm, bf] in x's dtype; gate_acc / up_acc: [bm, bf] f32
    k, last = pl.program_id(2), pl.num_programs(2) - 1
    x = x_ref[...]

    # The first emb step stores the products (no zero fill); later ones add to them.
    @pl.when(k == 0)
    def _first():
        gate_acc[...] = jnp.dot(x, wg_ref[...], preferred_element_type=jnp.float32)
        up_acc[...] = jnp.dot(x, wu_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k > 0)
    def _rest():
        gate_acc[...] += jnp.dot(x, wg_ref[...], preferred_element_type=jnp.float32)
        up_acc[...] += jnp.dot(x, wu_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == last)
    def _epilogue():
        def body(r, carry):
            rows = pl.ds(pl.multiple_of(r * piece, piece), piece)
            g = gate_acc[rows, :]
            # silu(g) = g * sigmoid(g), the sigmoid as 0.5 + 0.5 tanh(g / 2): one transcendental per element.
            h = g * (0.5 + 0.5 * jnp.tanh(0.5 * g)) * up_acc[rows, :]
            h_ref[rows, :] = h.astype(h_ref.dtype)
            return carry

        lax.fori_loop(0, gate_acc.shape[0] // piece, body, 0)


def gate_up(x, w_gate, w_up, bs: BlockSizes):
    """Pass 1: h = silu(x @ w_gate) * (x @ w_up) [tokens, mlp_dim] in x's dtype, f32 accumulation."""
    (m, e), f = x.shape, w_gate.shape[1]
    bm, bf, be = bs.block_m, bs.block_f, bs.block_e
    grid = (m // bm, f // bf, e // be)
    size = jnp.dtype(x.dtype).itemsize
    piece = EPILOGUE_ROWS if bm % EPILOGUE_ROWS == 0 else bm
    cost = pl.CostEstimate(flops=4 * m * e * f + 5 * m * f, transcendentals=m * f,
                           bytes_accessed=size * (m * e * grid[1] + 2 * e * f * grid[0] + m * f))
    return pl.pallas_call(
        functools.partial(_gate_up_kernel, piece=piece),
        out_shape=jax.ShapeDtypeStruct((m, f), x.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bm, be), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((be, bf), lambda i, j, kk: (kk, j)),
            pl.BlockSpec((be, bf), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((bm, bf), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bf), jnp.float32), pltpu.VMEM((bm, bf), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            # double-buffered x, w_gate, w_up and h blocks; two f32 accumulators and the two dots' f32 results.
            vmem_limit_bytes=_vmem_limit(2 * size * bm * be, 4 * size * be * bf, 2 * size * bm * bf,
                                         4 * 4 * bm * bf)),
        cost_estimate=cost,
        interpret=False,
    )(x, w_gate, w_up)


def _down_kernel(h_ref, w_ref, o_ref, acc_ref):
    # h_ref: [bm, bk], w_ref: [bk, bn], o_ref: [bm, bn] in h's dtype, acc_ref: [bm, bn] f32
    k, last = pl.program_id(2), pl.num_programs(2) - 1

    @pl.when(k == 0)
    def _first():
        acc_ref[...] = jnp.dot(h_ref[...], w_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k > 0)
    def _rest():
        acc_ref[...] += jnp.dot(h_ref[...], w_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == last)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def down(h, w_down, bs: BlockSizes):
    """Pass 2: h @ w_down [tokens, emb_dim] in h's dtype, f32 accumulation."""
    (m, f), e = h.shape, w_down.shape[1]
    bm, bn, bk = bs.block_m, bs.down_block_n, bs.down_block_k
    grid = (m // bm, e // bn, f // bk)
    size = jnp.dtype(h.dtype).itemsize
    cost = pl.CostEstimate(flops=2 * m * e * f, transcendentals=0,
                           bytes_accessed=size * (m * f * grid[1] + f * e * grid[0] + m * e))
    return pl.pallas_call(
        _down_kernel,
        out_shape=jax.ShapeDtypeStruct((m, e), h.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=_vmem_limit(2 * size * bm * bk, 2 * size * bk * bn, 2 * size * bm * bn,
                                         2 * 4 * bm * bn)),
        cost_estimate=cost,
        interpret=False,
    )(h, w_down)


@functools.partial(jax.jit, static_argnames=tuple(TUNABLES))
def workload(
    x: jax.Array,  # [batch, seq_len, emb_dim]
    w_gate: jax.Array,  # [emb_dim, mlp_dim]
    w_up: jax.Array,  # [emb_dim, mlp_dim]
    w_down: jax.Array,  # [mlp_dim, emb_dim]
    *,
    block_m: int = 1024,
    block_f: int = 1024,
    block_e: int = 2048,
    down_block_n: int = 2048,
    down_block_k: int = 2048,
) -> jax.Array:  # [batch, seq_len, emb_dim] in x's dtype
    """(silu(x @ w_gate) * (x @ w_up)) @ w_down; the hidden product is rounded to x's dtype, as the baseline does."""
    batch, seq, e = x.shape
    if w_gate.shape != w_up.shape or w_gate.shape[0] != e or w_down.shape != w_gate.shape[::-1]:
        raise ValueError(f"shapes disagree: x {x.shape}, w_gate {w_gate.shape}, w_up {w_up.shape}, "
                         f"w_down {w_down.shape}")
    f = w_gate.shape[1]
    tokens = batch * seq
    bs = BlockSizes.fit(tokens, e, f, block_m=block_m, block_f=block_f, block_e=block_e,
                        down_block_n=down_block_n, down_block_k=down_block_k)
    h = gate_up(x.reshape(tokens, e), w_gate, w_up, bs)
    return down(h, w_down, bs).reshape(batch, seq, e)
