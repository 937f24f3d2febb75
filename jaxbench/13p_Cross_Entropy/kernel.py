"""Pallas TPU kernel for 13p_Cross_Entropy: the LM-head GEMM with an online logsumexp over vocabulary tiles, so the
[tokens, vocab] f32 logits never reach HBM; each token's label logit is picked from its tile on the way."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# One grid step is a [block_t, hidden] x [hidden, block_v] MXU product over the whole hidden dim (no accumulator):
# its f32 logit tile updates the token block's running max and sum of exponentials and its label logit, and the last
# vocab step writes lse - label_logit. The hidden block stays resident along the vocab axis, so the unembedding is
# streamed cdiv(tokens, block_t) times (8 at 1024 rows: compute-bound on v5e and v6e). The block shapes are the
# settings themselves, whatever the sizes (so the estimator may profile at fewer tokens and a smaller vocabulary with
# the same blocks): the grid is cdiv(tokens, block_t) x cdiv(vocab, block_v); the columns of a partial last vocab
# tile past the vocabulary are set to -inf (a select, so the padding's garbage never reaches the sums), and the rows
# of a partial last token block are independent garbage whose outputs are never written back. 768 = 3 * 256 divides
# 128256 = 167 * 768 (no padded tile at full size) and is a multiple of v6e's 256-wide MXU.
TUNABLES = {
    "block_t": (256, 512, 1024, 2048),
    "block_v": (512, 768, 1024, 2048),
}

ROW_ALIGN, LANES = 16, 128


def _vmem_limit(*block_bytes: int) -> int:
    """Scoped VMEM for blocks and scratch of `block_bytes` (double-buffered ones passed twice), a quarter more for
    Mosaic's own scratch; never below the 16 MiB default, never above 100 MiB (v5e and v6e have 128)."""
    return int(min(max(sum(block_bytes) * 5 // 4, 16 << 20), 100 << 20))


def _ce_kernel(x_ref, w_ref, lab_ref, o_ref, m_ref, l_ref, t_ref, *, vocab: int):
    # x_ref: [bt, hidden], w_ref: [hidden, bv], lab_ref: [bt, 1] int32, o_ref: [bt, 1] f32
    # m_ref / l_ref: [bt, 1] f32 running max and sum of exp(logit - max); t_ref: [bt, 1] f32 the label logit
    j, last = pl.program_id(1), pl.num_programs(1) - 1
    bv = w_ref.shape[1]
    cols = lax.broadcasted_iota(jnp.int32, (1, bv), 1)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        t_ref[...] = jnp.zeros_like(t_ref)

    s = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)  # [bt, bv] logits, f32
    # A partial last tile's columns past the vocabulary hold garbage (even NaN) -> -inf, by select. Applied at every
    # size, whether or not the vocabulary divides: the program checked at a small size is the one priced at full.
    s = jnp.where(cols < vocab - j * bv, s, -jnp.inf)
    m_prev = m_ref[...]
    m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
    l_ref[...] = jnp.exp(m_prev - m_new) * l_ref[...] + jnp.sum(jnp.exp(s - m_new), axis=-1, keepdims=True)
    m_ref[...] = m_new
    # The label's column within this tile (out of [0, bv) when the label lies in another tile): at most one hit.
    local = lab_ref[...] - j * bv
    t_ref[...] += jnp.sum(jnp.where(cols == local, s, 0.0), axis=-1, keepdims=True)

    @pl.when(j == last)
    def _store():
        o_ref[...] = m_ref[...] + jnp.log(l_ref[...]) - t_ref[...]


@functools.partial(jax.jit, static_argnames=tuple(TUNABLES))
def workload(
    hidden: jax.Array,  # [batch_tokens, hidden_dim]
    unembedding: jax.Array,  # [hidden_dim, vocab_size]
    labels: jax.Array,  # [batch_tokens] int32
    *,
    block_t: int = 1024,
    block_v: int = 768,
) -> jax.Array:  # [batch_tokens] f32 per-token losses
    """logsumexp(hidden @ unembedding) - (hidden @ unembedding)[label], per token, from f32 logits."""
    (t, h), (h_w, v) = hidden.shape, unembedding.shape
    if h != h_w or labels.shape != (t,):
        raise ValueError(f"shapes disagree: hidden {hidden.shape}, unembedding {unembedding.shape}, "
                         f"labels {labels.shape}")
    for name, value, align in (("block_t", block_t, ROW_ALIGN), ("block_v", block_v, LANES)):
        if value <= 0 or value % align:
            raise ValueError(f"{name}={value} must be a positive multiple of {align}")
    bt, bv = block_t, block_v
    grid = (pl.cdiv(t, bt), pl.cdiv(v, bv))
    size = jnp.dtype(hidden.dtype).itemsize
    wsize = jnp.dtype(unembedding.dtype).itemsize
    cost = pl.CostEstimate(flops=2 * t * h * v + 6 * t * v, transcendentals=t * v + t * grid[1],
                           bytes_accessed=size * t * h + wsize * h * v * grid[0] + 8 * t)
    out = pl.pallas_call(
        functools.partial(_ce_kernel, vocab=v),
        out_shape=jax.ShapeDtypeStruct((t, 1), jnp.float32),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bt, h), lambda i, j: (i, 0)),
            pl.BlockSpec((h, bv), lambda i, j: (0, j)),
            pl.BlockSpec((bt, 1), lambda i, j: (i, 0)),
        ],
        out_specs=pl.BlockSpec((bt, 1), lambda i, j: (i, 0)),
        scratch_shapes=[pltpu.VMEM((bt, 1), jnp.float32)] * 3,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary"),
            # double-buffered hidden and unembedding blocks; the f32 logit tile and two whole-tile temporaries
            # (exp, select); the [bt, 1] blocks and scratch pad to 128 lanes.
            vmem_limit_bytes=_vmem_limit(2 * size * bt * h, 2 * wsize * h * bv, 3 * 4 * bt * bv,
                                         7 * 4 * bt * LANES)),
        cost_estimate=cost,
        interpret=False,
    )(hidden, unembedding, labels.astype(jnp.int32).reshape(t, 1))
    return out.reshape(t)
