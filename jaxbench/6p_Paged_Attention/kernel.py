"""Pallas TPU kernel for 6p_Paged_Attention: GQA decode over a paged KV cache, online softmax over page blocks.

One grid row per sequence, one grid step per block of `pages_per_block` pages. The page table and the lengths are
scalar-prefetched; each of the block's pages is its own BlockSpec operand whose index map looks the page up in the
table, so the pipeline DMAs the pages of the next block while this one is computed. A page is read whole, as
[page_size, num_kv_heads * head_dim] (a free reshape of the cache): one contiguous DMA per page, and every kv head's
columns are a lane-aligned slice. All query heads are handled at once: q is spread into a block-diagonal
[num_q_heads, num_kv_heads * head_dim] matrix (query head h only in its kv head's columns), so one MXU product gives
every head's logits against its own kv head, and p @ v gives, in each head's own columns, its output; a 0/1 fold
matrix brings those columns back to [num_q_heads, head_dim] at the end. Decode attention is bound by the KV reads,
so the kv-head-fold extra MXU work is hidden. Pages past a sequence's length are not fetched (their index maps
repeat the last valid page, so no new DMA) and their blocks are skipped; tokens past the length in the last page
are masked.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# pages_per_block: pages (page_size tokens each) per grid step; each page is one BlockSpec operand for k and one for
# v, so larger blocks mean fewer grid steps but more operands.
TUNABLES = {
    "pages_per_block": (4, 8, 16),
}

# Finite, so a masked logit gives exp(MASK - m) = 0, never the NaN of (-inf) - (-inf).
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # a[r, c] . b[t, c] -> [r, t]


def _paged_kernel(lens_ref, pidx_ref, q_ref, expand_ref, fold_ref, *refs, ppb, page_size, group, head_dim,
                  sm_scale):
    # q_ref / o_ref: [num_q, head_dim]; expand_ref: [head_dim, kv_cols] bf16 (tiled identity);
    # fold_ref: [kv_cols, head_dim] f32 (its transpose); k / v refs: [page_size, kv_cols], kv_cols = kv heads * head_dim
    k_refs, v_refs = refs[:ppb], refs[ppb:2 * ppb]
    o_ref, qbd_ref, m_ref, l_ref, acc_ref = refs[2 * ppb:]
    s_idx, b = pl.program_id(0), pl.program_id(1)
    length = lens_ref[s_idx]
    tokens = ppb * page_size

    def head_mask(shape):
        # query head r reads kv head r // group; column c belongs to kv head c // head_dim
        rows = lax.broadcasted_iota(jnp.int32, shape, 0)
        cols = lax.broadcasted_iota(jnp.int32, shape, 1)
        return lax.div(rows, group) == lax.div(cols, head_dim)

    @pl.when(b == 0)
    def _init():
        q_rep = jnp.dot(q_ref[...], expand_ref[...], preferred_element_type=jnp.float32)  # q copied per kv head
        qbd_ref[...] = jnp.where(head_mask(q_rep.shape), q_rep, 0.0).astype(qbd_ref.dtype)
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(b * tokens < length)
    def _step():
        k = jnp.concatenate([r[...] for r in k_refs], axis=0)  # [tokens, kv_cols]
        v = jnp.concatenate([r[...] for r in v_refs], axis=0)
        s = lax.dot_general(qbd_ref[...], k, _CONTRACT_LAST, preferred_element_type=jnp.float32) * sm_scale
        pos = b * tokens + lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(pos < length, s, MASK_VALUE)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    @pl.when(b == pl.num_programs(1) - 1)
    def _store():
        acc = acc_ref[...]
        own = jnp.where(head_mask(acc.shape), acc, 0.0) / l_ref[...]  # each head's own kv head's columns
        out = jnp.dot(own, fold_ref[...], preferred_element_type=jnp.float32, precision=lax.Precision.HIGHEST)
        o_ref[...] = out.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("pages_per_block",))
def paged_attention(q, k_pages, v_pages, lengths, page_indices, *, pages_per_block: int):
    num_seqs, num_q, head_dim = q.shape
    num_pages, page_size, num_kv, head_dim_k = k_pages.shape
    pps = page_indices.shape[1]
    if head_dim_k != head_dim or v_pages.shape != k_pages.shape:
        raise ValueError(f"shapes disagree: q {q.shape}, k_pages {k_pages.shape}, v_pages {v_pages.shape}")
    if num_q % num_kv:
        raise ValueError(f"num_q_heads={num_q} is not a multiple of num_kv_heads={num_kv}")
    if pages_per_block <= 0:
        raise ValueError(f"pages_per_block={pages_per_block} must be positive")
    ppb = min(pages_per_block, pps)
    while pps % ppb:
        ppb -= 1
    nb = pps // ppb
    group = num_q // num_kv
    kv_cols = num_kv * head_dim
    kf = k_pages.reshape(num_pages, page_size, kv_cols)
    vf = v_pages.reshape(num_pages, page_size, kv_cols)
    expand = jnp.tile(jnp.eye(head_dim, dtype=q.dtype), (1, num_kv))  # [head_dim, kv_cols]
    fold = jnp.tile(jnp.eye(head_dim, dtype=jnp.float32), (num_kv, 1))  # [kv_cols, head_dim]
    lens = lengths.astype(jnp.int32)
    pidx = page_indices.astype(jnp.int32).reshape(-1)

    def page_map(i):
        def index(s, b, lens_ref, pidx_ref):
            last = lax.div(jnp.maximum(lens_ref[s] - 1, 0), page_size)  # the sequence's last valid page
            j = jnp.minimum(b * ppb + i, last)
            return (pidx_ref[s * pps + j], 0, 0)
        return index

    page_spec = [pl.BlockSpec((None, page_size, kv_cols), page_map(i)) for i in range(ppb)]
    whole = lambda s, b, lens_ref, pidx_ref: (0, 0)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(num_seqs, nb),
        in_specs=[pl.BlockSpec((None, num_q, head_dim), lambda s, b, lens_ref, pidx_ref: (s, 0, 0)),
                  pl.BlockSpec((head_dim, kv_cols), whole),
                  pl.BlockSpec((kv_cols, head_dim), whole),
                  *page_spec, *page_spec],
        out_specs=pl.BlockSpec((None, num_q, head_dim), lambda s, b, lens_ref, pidx_ref: (s, 0, 0)),
        scratch_shapes=[pltpu.VMEM((num_q, kv_cols), q.dtype),
                        pltpu.VMEM((num_q, 1), jnp.float32),
                        pltpu.VMEM((num_q, 1), jnp.float32),
                        pltpu.VMEM((num_q, kv_cols), jnp.float32)],
    )
    size = jnp.dtype(q.dtype).itemsize
    max_tokens = num_seqs * pps * page_size
    cost = pl.CostEstimate(
        flops=4 * num_q * max_tokens * kv_cols,
        transcendentals=num_q * max_tokens,
        bytes_accessed=size * (2 * q.size + 2 * max_tokens * kv_cols),
    )
    kernel = functools.partial(_paged_kernel, ppb=ppb, page_size=page_size, group=group, head_dim=head_dim,
                               sm_scale=1.0 / math.sqrt(head_dim))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=grid_spec,
        # The page-block axis carries the online-softmax state; sequences are independent.
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        cost_estimate=cost,
        interpret=False,
    )(lens, pidx, q, expand, fold, *([kf] * ppb), *([vf] * ppb))


def workload(q, k_pages, v_pages, lengths, page_indices, *, pages_per_block: int = 16):
    """softmax(q k^T / sqrt(head_dim)) v per sequence over its first `length` cached tokens, read through the pages."""
    return paged_attention(q, k_pages, v_pages, lengths, page_indices, pages_per_block=pages_per_block)
