"""Pallas TPU kernel for rw_paged_mla_decode: absorbed MLA decode over a paged latent cache, online softmax.

In absorbed form every head attends to the same latent cache, so a sequence's new tokens and heads together are one
[seq_q * num_heads, 576] query matrix against one [tokens, 576] key matrix, and the value is the key's first 512
columns (c_kv): two MXU products per block of cached tokens, for all heads at once.

One grid row per sequence, one grid step per block of `pages_per_block` pages. The page table and the lengths are
scalar-prefetched; each page of the block is its own BlockSpec operand whose index map looks it up in the table, so
the pipeline fetches the next block's pages (one contiguous [page_size, 576] DMA each) while this one is computed.
Pages past a sequence's length are not fetched (their index maps repeat the last valid page) and their steps are
skipped; positions past what a row may see (its length, and causally between the new tokens) are masked. The
latent cache is read once per sequence, so the kernel is bound by those reads or by the two products, whichever
is longer; XLA's program gathers the pages into a contiguous copy first and keeps the [heads, tokens] logits in HBM.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# pages_per_block: pages (page_size cached tokens each) per grid step, each page its own operand.
TUNABLES = {"pages_per_block": (4, 8, 16)}

ROPE_DIM = 64  # qk_rope_head_dim: the key's last columns, not part of the value
# Finite, so a masked logit gives exp(MASK - m) = 0, never the NaN of (-inf) - (-inf).
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # a[r, c] . b[t, c] -> [r, t]
# DeepSeek-V3's softmax scale: (qk_nope_head_dim 128 + qk_rope_head_dim 64)^-0.5 times YaRN's mscale^2, mscale =
# 0.1 * ln(rope factor 40) + 1.
SOFTMAX_SCALE = (128 + ROPE_DIM) ** -0.5 * (0.1 * math.log(40.0) + 1.0) ** 2


def _mla_kernel(lens_ref, table_ref, q_ref, *refs, ppb, page_size, heads, seq_q, rank, scale):
    # q_ref: [seq_q * heads, width]; page refs: [page_size, width]; o_ref: [seq_q * heads, rank]
    page_refs = refs[:ppb]
    o_ref, m_ref, l_ref, acc_ref = refs[ppb:]
    s_idx, blk = pl.program_id(0), pl.program_id(1)
    length = lens_ref[s_idx]
    tokens = ppb * page_size

    @pl.when(blk == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(blk * tokens < length)
    def _step():
        kv = jnp.concatenate([r[...] for r in page_refs], axis=0)  # [tokens, width]
        s = lax.dot_general(q_ref[...], kv, _CONTRACT_LAST, preferred_element_type=jnp.float32) * scale
        # row r is new token r // heads, at position length - seq_q + r // heads; it sees positions up to there
        row_last = length - seq_q + lax.div(lax.broadcasted_iota(jnp.int32, s.shape, 0), heads)
        pos = blk * tokens + lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(pos <= row_last, s, MASK_VALUE)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(kv.dtype), kv[:, :rank],
                                                      preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    @pl.when(blk == pl.num_programs(1) - 1)
    def _store():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("pages_per_block", "scale"))
def paged_mla_decode(q, kv_pages, lengths, page_table, *, pages_per_block: int, scale: float):
    batch, seq_q, heads, width = q.shape
    num_pages, page_size, width_kv = kv_pages.shape
    pps = page_table.shape[1]
    rank = width - ROPE_DIM
    if width_kv != width or rank <= 0:
        raise ValueError(f"q {q.shape} and kv_pages {kv_pages.shape} disagree on the latent + rope width")
    if page_table.shape[0] != batch or lengths.shape != (batch,):
        raise ValueError(f"page_table {page_table.shape} and lengths {lengths.shape} must have batch={batch} rows")
    if pages_per_block <= 0:
        raise ValueError(f"pages_per_block={pages_per_block} must be positive")
    ppb = min(pages_per_block, pps)
    while pps % ppb:
        ppb -= 1
    rows = seq_q * heads
    q_rows = q.reshape(batch, rows, width)  # row r = (new token r // heads, head r % heads)
    lens = lengths.astype(jnp.int32)
    table = page_table.astype(jnp.int32).reshape(-1)

    def page_map(i):
        def index(s, b, lens_ref, table_ref):
            last = lax.div(jnp.maximum(lens_ref[s] - 1, 0), page_size)  # the sequence's last valid page
            return (table_ref[s * pps + jnp.minimum(b * ppb + i, last)], 0, 0)
        return index

    size = jnp.dtype(q.dtype).itemsize
    max_tokens = batch * pps * page_size
    out = pl.pallas_call(
        functools.partial(_mla_kernel, ppb=ppb, page_size=page_size, heads=heads, seq_q=seq_q, rank=rank,
                          scale=scale),
        out_shape=jax.ShapeDtypeStruct((batch, rows, rank), q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(batch, pps // ppb),
            in_specs=[pl.BlockSpec((None, rows, width), lambda s, b, lens_ref, table_ref: (s, 0, 0)),
                      *[pl.BlockSpec((None, page_size, width), page_map(i)) for i in range(ppb)]],
            out_specs=pl.BlockSpec((None, rows, rank), lambda s, b, lens_ref, table_ref: (s, 0, 0)),
            scratch_shapes=[pltpu.VMEM((rows, 1), jnp.float32),
                            pltpu.VMEM((rows, 1), jnp.float32),
                            pltpu.VMEM((rows, rank), jnp.float32)]),
        # the page-block axis carries the online-softmax state; sequences are independent
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(flops=2 * rows * max_tokens * (width + rank), transcendentals=rows * max_tokens,
                                      bytes_accessed=size * (q.size + max_tokens * width + batch * rows * rank)),
        interpret=False,
    )(lens, table, q_rows, *([kv_pages] * ppb))
    return out.reshape(batch, seq_q, heads, rank)


def workload(q, kv_pages, lengths, page_table, *, pages_per_block: int = 8):
    """softmax(softmax_scale * q . [c_kv, k_rope]) . c_kv per sequence, head and new token, over the cached tokens
    it may see, read through the page table: [batch, seq_q, num_heads, kv_lora_rank]."""
    return paged_mla_decode(q, kv_pages, lengths, page_table, pages_per_block=pages_per_block, scale=SOFTMAX_SCALE)
