"""Pallas TPU kernel for rw_lightning_indexer: DeepSeek-V3.2's lightning-indexer scores, computed tile by tile without
ever writing the per-head logits, then XLA's top-k over them.

XLA's program writes and reads back every head's f32 logits (batch x seq_q x heads x seq_k x 4 bytes: 64 GiB at the
full prefill size) to apply the ReLU, the head weights and the head sum. Here a grid step holds `block_t` query rows
(all their heads, [block_t * heads, head_dim]) and `block_s` keys, and walks the keys in `sub`-wide pieces: one MXU
matmul gives the piece's logits for every (row, head), the ReLU and the head weight are applied in VMEM, and the
heads are summed into the [block_t, sub] scores, the only thing written. Key pieces no query row of the block can
see (causal prefill) are not computed, and key blocks entirely past the block's last row are not even fetched
(their index map repeats the last visible block, so the pipeline skips the copy).
The top-k stays XLA's: the scores are a twentieth of the logits' traffic at the full size, and a sort is not
work the MXU does.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {
    "block_t": (8, 16, 32),
    "block_s": (1024, 2048, 4096),
    "sub": (256, 512),
    "decode_block_s": (4096, 8192, 16384),
}

INDEX_TOPK = 2048  # baseline.py CONFIG["index_topk"]
SUBLANES, LANES = 8, 128


def _divisor(extent: int, want: int, align: int) -> int:
    """The largest multiple of `align` that divides `extent` and is at most `want`, else all of `extent`."""
    for b in range(min(want, extent) // align * align, 0, -align):
        if extent % b == 0:
            return b
    return extent


def _indexer_kernel(q_ref, w_ref, k_ref, s_ref, *, sub: int, offset: int):
    # q_ref: [bt, heads, head_dim]; w_ref: [bt * heads, 1] f32, the head weights times the score scale, row-major
    # (row, head) like q's rows; k_ref: [bs, head_dim]; s_ref: [bt, bs] f32 scores, -inf where the key is not visible.
    # `offset` = seq_k - seq_q: query row r of the task sees keys 0 .. offset + r.
    i, j = pl.program_id(1), pl.program_id(2)
    bt, heads, head_dim = q_ref.shape
    bs = k_ref.shape[0]
    first_row = offset + i * bt  # the block's first query row's last visible key
    q = q_ref[...].reshape(bt * heads, head_dim)
    w = w_ref[...]
    row = first_row + lax.broadcasted_iota(jnp.int32, (bt, sub), 0)
    col0 = lax.broadcasted_iota(jnp.int32, (bt, sub), 1)

    def piece(c, carry):
        start = j * bs + c * sub  # the piece's first key
        cols = pl.ds(pl.multiple_of(c * sub, LANES), sub)

        @pl.when(start <= first_row + bt - 1)
        def _score():
            k = k_ref[cols, :]
            logits = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
            scores = jnp.sum((jnp.maximum(logits, 0.0) * w).reshape(bt, heads, sub), axis=1)
            s_ref[:, cols] = jnp.where(start + col0 <= row, scores, -jnp.inf)

        @pl.when(start > first_row + bt - 1)
        def _hidden():
            s_ref[:, cols] = jnp.full((bt, sub), -jnp.inf, jnp.float32)

        return carry

    lax.fori_loop(0, bs // sub, piece, 0)


def _scores(q, k, w, *, block_t: int, block_s: int, sub: int):
    batch, seq_q, heads, head_dim = q.shape
    seq_k = k.shape[1]
    bt = min(block_t, seq_q)
    if seq_q % bt or (bt != seq_q and bt % SUBLANES):
        raise ValueError(f"block_t={bt} must divide seq_q={seq_q} and be a multiple of {SUBLANES}")
    if seq_k % LANES:
        raise ValueError(f"seq_k={seq_k} must be a multiple of {LANES}")
    bs = _divisor(seq_k, block_s, LANES)
    sub = _divisor(bs, sub, LANES)
    offset = seq_k - seq_q
    scale = 1.0 / math.sqrt(heads * head_dim)
    wf = (w.astype(jnp.float32) * scale).reshape(batch, seq_q * heads, 1)

    def k_block(b, i, j):  # blocks past the query block's last visible key repeat the last visible one: no copy
        return (b, jnp.minimum(j, lax.div(offset + (i + 1) * bt - 1, bs)), 0)

    visible = batch * (seq_q * offset + seq_q * (seq_q + 1) // 2)
    cost = pl.CostEstimate(flops=visible * heads * (2 * head_dim + 3), transcendentals=0,
                           bytes_accessed=2 * q.size + 4 * w.size + 2 * k.size * max(1, seq_q // bt) // 2
                           + 4 * batch * seq_q * seq_k)
    size = jnp.dtype(q.dtype).itemsize
    blocks = 2 * (size * bt * heads * head_dim + 4 * bt * heads * LANES + size * bs * head_dim + 4 * bt * bs)
    temps = 3 * 4 * bt * heads * sub  # the piece's logits and their weighted ReLU, in f32
    return pl.pallas_call(
        functools.partial(_indexer_kernel, sub=sub, offset=offset),
        out_shape=jax.ShapeDtypeStruct((batch, seq_q, seq_k), jnp.float32),
        grid=(batch, seq_q // bt, seq_k // bs),
        in_specs=[
            pl.BlockSpec((None, bt, heads, head_dim), lambda b, i, j: (b, i, 0, 0)),
            pl.BlockSpec((None, bt * heads, 1), lambda b, i, j: (b, i, 0)),
            pl.BlockSpec((None, bs, head_dim), k_block),
        ],
        out_specs=pl.BlockSpec((None, bt, bs), lambda b, i, j: (b, i, j)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel"),
            vmem_limit_bytes=int(min(max((blocks + temps) * 5 // 4 + (4 << 20), 16 << 20), 100 << 20))),
        cost_estimate=cost,
        interpret=False,
    )(q, wf, k)


@functools.partial(jax.jit, static_argnames=tuple(TUNABLES))
def workload(
    q: jax.Array,  # [batch, seq_q, heads, head_dim]
    k: jax.Array,  # [batch, seq_k, head_dim]
    w: jax.Array,  # [batch, seq_q, heads] f32
    *,
    block_t: int = 16,
    block_s: int = 4096,
    sub: int = 512,
    decode_block_s: int = 8192,
):  # -> f32 [batch, seq_q, min(INDEX_TOPK, seq_k)]: each row's largest visible scores, descending, 0-filled
    batch, seq_q, heads, head_dim = q.shape
    if k.shape != (batch, k.shape[1], head_dim) or w.shape != (batch, seq_q, heads):
        raise ValueError(f"k {k.shape} / w {w.shape} do not match q {q.shape}")
    if seq_q > k.shape[1]:
        raise ValueError(f"seq_q={seq_q} > seq_k={k.shape[1]}: query rows are the last seq_q key positions")
    scores = _scores(q, k, w, block_t=block_t, block_s=decode_block_s if seq_q == 1 else block_s, sub=sub)
    # The top-k on [rows, keys]: a decode's [batch, 1, keys] would leave the sort one row per 8-row tile.
    topk = min(INDEX_TOPK, k.shape[1])
    top = lax.top_k(scores.reshape(batch * seq_q, -1), topk)[0].reshape(batch, seq_q, topk)
    return jnp.where(jnp.isfinite(top), top, 0.0)
