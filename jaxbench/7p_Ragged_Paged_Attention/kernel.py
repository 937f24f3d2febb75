"""Pallas TPU kernel for 7p_Ragged_Paged_Attention: a mixed prefill/decode batch over a paged, shuffled KV cache.

The batch is cut into items: one item is `block_q` query rows of one sequence (a decode is one item of one row).
One grid row per item, one grid step per block of `pages_per_block` pages of that item's sequence. The item table
(its sequence, the kv position of its first row, the sequence's kv length) and the page table are scalar-prefetched;
each page of a block is its own BlockSpec operand looked up in the table and read whole, as
[page_size, 2 * kv_heads * head_dim] (a free reshape of the cache, so k head h and v head h are lane-aligned column
slices). Pages past what the item's last row can see are neither fetched (their index maps repeat the last needed
page) nor computed. Per kv head, the item's rows of its `group` query heads are one [block_q * group, head_dim]
matrix (gathered so by the wrapper), so each head's logits are one MXU product; the causal mask is per element.
The wrapper reads each token's row back from the item that computed it; padding tokens output zeros.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {
    "block_q": (16, 32, 64),  # query rows per item (a decode pays for a whole item)
    "pages_per_block": (4, 8, 16),  # pages per grid step, one BlockSpec operand each
}

MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # a[r, d] . b[t, d] -> [r, t]


def _ragged_kernel(seq_ref, qpos_ref, klen_ref, valid_ref, pidx_ref, q_ref, *refs, ppb, page_size, num_kv, group,
                   head_dim, sm_scale):
    # q_ref / o_ref: [num_kv, block_q * group, head_dim], row r * group + g is query row r of head h * group + g.
    # page refs: [page_size, 2 * num_kv * head_dim], k head h at columns 2h * head_dim, v head h the next head_dim.
    page_refs = refs[:ppb]
    o_ref, m_ref, l_ref, acc_ref = refs[ppb:]
    item, b = pl.program_id(0), pl.program_id(1)
    tokens = ppb * page_size
    qpos0 = qpos_ref[item]
    last_pos = jnp.minimum(qpos0 + q_ref.shape[1] // group - 1, klen_ref[item] - 1)

    @pl.when(b == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when((valid_ref[item] == 1) & (b * tokens <= last_pos))
    def _step():
        rows = q_ref.shape[1]
        qpos = qpos0 + lax.div(lax.broadcasted_iota(jnp.int32, (rows, tokens), 0), group)
        kpos = b * tokens + lax.broadcasted_iota(jnp.int32, (rows, tokens), 1)
        visible = kpos <= qpos
        for h in range(num_kv):
            k = jnp.concatenate([r[:, 2 * h * head_dim:(2 * h + 1) * head_dim] for r in page_refs], axis=0)
            v = jnp.concatenate([r[:, (2 * h + 1) * head_dim:(2 * h + 2) * head_dim] for r in page_refs], axis=0)
            s = lax.dot_general(q_ref[h], k, _CONTRACT_LAST, preferred_element_type=jnp.float32) * sm_scale
            s = jnp.where(visible, s, MASK_VALUE)
            m_prev = m_ref[h]
            m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
            alpha = jnp.exp(m_prev - m_new)
            p = jnp.exp(s - m_new)
            l_ref[h] = alpha * l_ref[h] + jnp.sum(p, axis=-1, keepdims=True)
            acc_ref[h] = alpha * acc_ref[h] + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
            m_ref[h] = m_new

    @pl.when(b == pl.num_programs(1) - 1)
    def _store():
        ok = valid_ref[item] == 1
        for h in range(num_kv):
            out = acc_ref[h] / jnp.where(ok, l_ref[h], 1.0)
            o_ref[h] = jnp.where(ok, out, 0.0).astype(o_ref.dtype)


def _items(cu_q_lens, kv_lens, num_seqs, *, bq: int, n_items: int):
    """Per item: (sequence, block within it, kv position of its first row, the sequence's kv length, valid), and per
    sequence the index of its first item."""
    max_seqs = kv_lens.shape[0]
    q_lens = cu_q_lens[1:] - cu_q_lens[:-1]
    blocks = jnp.where(jnp.arange(max_seqs) < num_seqs[0], (q_lens + bq - 1) // bq, 0)
    block_end = jnp.cumsum(blocks)
    block_start = block_end - blocks
    item = jnp.arange(n_items)
    seq = jnp.minimum(jnp.searchsorted(block_end, item, side="right"), max_seqs - 1).astype(jnp.int32)
    blk = item - block_start[seq]
    qpos0 = (kv_lens[seq] - q_lens[seq] + blk * bq).astype(jnp.int32)
    valid = (item < block_end[-1]).astype(jnp.int32)
    return seq, blk, qpos0, kv_lens[seq].astype(jnp.int32), valid, block_start


@functools.partial(jax.jit, static_argnames=("block_q", "pages_per_block"))
def ragged_paged_attention(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *, block_q: int,
                           pages_per_block: int):
    tokens, num_q, head_dim = queries.shape
    num_pages, page_size, two_kv, _ = kv_pages.shape
    num_kv = two_kv // 2
    max_seqs, pps = page_indices.shape
    if num_q % num_kv:
        raise ValueError(f"num_q_heads={num_q} is not a multiple of num_kv_heads={num_kv}")
    if block_q <= 0 or pages_per_block <= 0:
        raise ValueError(f"block_q={block_q} and pages_per_block={pages_per_block} must be positive")
    group = num_q // num_kv
    bq = min(block_q, tokens)
    # A fixed page count per step at every size (the program checked at the smoke size is the one priced at full
    # size): a block reaching past the table repeats the last page the item needs, so it adds no DMA and no work.
    ppb = pages_per_block
    nb = -(-pps // ppb)
    n_items = -(-tokens // bq) + max_seqs  # every sequence adds at most one partial block
    seq, blk, qpos0, klen, valid, block_start = _items(cu_q_lens, kv_lens, num_seqs, bq=bq, n_items=n_items)

    # Each item's query rows, per kv head as one [bq * group, head_dim] matrix.
    rows = jnp.clip((cu_q_lens[seq] + blk * bq)[:, None] + jnp.arange(bq)[None, :], 0, tokens - 1)
    q_items = queries[rows].reshape(n_items, bq, num_kv, group, head_dim).transpose(0, 2, 1, 3, 4)
    q_items = q_items.reshape(n_items, num_kv, bq * group, head_dim)
    pages = kv_pages.reshape(num_pages, page_size, two_kv * head_dim)
    pidx = page_indices.astype(jnp.int32).reshape(-1)

    def page_map(i):
        def index(it, b, seq_ref, qpos_ref, klen_ref, valid_ref, pidx_ref):
            last_pos = jnp.minimum(qpos_ref[it] + bq - 1, klen_ref[it] - 1)
            last = lax.div(jnp.maximum(last_pos, 0), page_size)  # the last page the item's rows can see
            j = jnp.minimum(b * ppb + i, last)
            return (pidx_ref[seq_ref[it] * pps + j], 0, 0)
        return index

    item_map = lambda it, b, *_: (it, 0, 0, 0)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=5,
        grid=(n_items, nb),
        in_specs=[pl.BlockSpec((None, num_kv, bq * group, head_dim), item_map),
                  *[pl.BlockSpec((None, page_size, two_kv * head_dim), page_map(i)) for i in range(ppb)]],
        out_specs=pl.BlockSpec((None, num_kv, bq * group, head_dim), item_map),
        scratch_shapes=[pltpu.VMEM((num_kv, bq * group, 1), jnp.float32),
                        pltpu.VMEM((num_kv, bq * group, 1), jnp.float32),
                        pltpu.VMEM((num_kv, bq * group, head_dim), jnp.float32)],
    )
    size = jnp.dtype(queries.dtype).itemsize
    max_kv = n_items * pps * page_size
    cost = pl.CostEstimate(flops=4 * n_items * bq * num_q * pps * page_size * head_dim,
                           transcendentals=n_items * bq * num_q * pps * page_size,
                           bytes_accessed=size * (2 * q_items.size + 2 * max_kv * num_kv * head_dim))
    kernel = functools.partial(_ragged_kernel, ppb=ppb, page_size=page_size, num_kv=num_kv, group=group,
                               head_dim=head_dim, sm_scale=1.0 / math.sqrt(head_dim))
    o_items = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q_items.shape, queries.dtype),
        grid_spec=grid_spec,
        # The page-block axis carries the online-softmax state; items are independent.
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        cost_estimate=cost,
        interpret=False,
    )(seq, qpos0, klen, valid, pidx, q_items, *([pages] * ppb))

    # Each token's row, read back from the item that computed it.
    o_items = o_items.reshape(n_items, num_kv, bq, group, head_dim).transpose(0, 2, 1, 3, 4)
    o_items = o_items.reshape(n_items, bq, num_q, head_dim)
    t = jnp.arange(tokens)
    tseq = jnp.minimum(jnp.searchsorted(cu_q_lens[1:], t, side="right"), max_seqs - 1)
    pos = jnp.maximum(t - cu_q_lens[tseq], 0)
    which = jnp.clip(block_start[tseq] + pos // bq, 0, n_items - 1)
    out = o_items[which, pos % bq]
    return jnp.where((t < cu_q_lens[num_seqs[0]])[:, None, None], out, 0).astype(queries.dtype)


def workload(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *, block_q: int = 32,
             pages_per_block: int = 16):
    """Each token attends causally to its sequence's cached kv; padding tokens output zeros."""
    return ragged_paged_attention(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, block_q=block_q,
                                  pages_per_block=pages_per_block)
