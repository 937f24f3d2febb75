"""Pallas TPU kernel for 5p_Flex_Attention: flash attention with the task's score_mod (tanh soft-cap, then ALiBi) and
mask_mod (causal within the query's packed document), online softmax over kv blocks.

Documents are contiguous runs of nondecreasing ids, so a q block only needs the kv blocks from the start of its first
row's document up to the diagonal. Those bounds (and which blocks need no mask) are scalar-prefetched; the grid walks
kv steps from that first block, the steps past the diagonal do nothing and repeat the last block index, so blocks
outside the range are neither computed nor fetched."""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Per grid step one [block_q, block_k] f32 logit tile (plus its tanh and exponentials) lives in VMEM.
TUNABLES = {
    "block_q": (128, 256, 512, 1024),
    "block_k": (128, 256, 512, 1024),
}

SOFTCAP = 20.0  # CONFIG["softcap"] of the task
SUBLANES, LANES = 8, 128
# Finite, so a row whose keys in a block are all masked gives exp terms the next rescale zeroes, never NaN.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # q[bq, d] . k[bk, d] -> [bq, bk]


def _fit(seq_len: int, block: int, align: int, name: str) -> int:
    block = min(block, seq_len)
    if seq_len % block:
        raise ValueError(f"{name}={block} does not divide seq_len={seq_len}")
    if block != seq_len and block % align:
        raise ValueError(f"{name}={block} must be a multiple of {align} or all of seq_len={seq_len}")
    return block


def alibi_slopes(num_heads):
    """ALiBi's geometric head slopes 2^(-8 (h+1) / num_heads), as the task defines them."""
    return 2.0 ** (-8.0 * (jnp.arange(num_heads, dtype=jnp.float32) + 1) / num_heads)


def _flex_kernel(first_ref, full_ref, slope_ref, q_ref, k_ref, v_ref, dq_ref, dk_ref, o_ref, m_ref, l_ref, acc_ref,
                 *, sm_scale, block_q, block_k, nq, nk):
    # first_ref [batch * nq]: first kv block of each q block; full_ref [batch * nq * nk]: 1 where a kv block is
    # wholly visible to a q block (no mask needed); slope_ref [heads] f32.
    # q_ref / o_ref [block_q, head_dim], k_ref / v_ref [block_k, head_dim], dq_ref [block_q, 1], dk_ref [1, block_k].
    b, h, qi, step = pl.program_id(0), pl.program_id(1), pl.program_id(2), pl.program_id(3)

    @pl.when(step == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    kj = first_ref[b * nq + qi] + step  # the kv block this step works on
    last = lax.div((qi + 1) * block_q - 1, block_k)  # the diagonal's kv block
    q_first, k_first = qi * block_q, kj * block_k
    slope = slope_ref[h]

    def compute(masked: bool):
        s = lax.dot_general(q_ref[...], k_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32) * sm_scale
        rows = q_first + lax.broadcasted_iota(jnp.int32, s.shape, 0)
        cols = k_first + lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = SOFTCAP * jnp.tanh(s * (1.0 / SOFTCAP)) + slope * (cols - rows).astype(jnp.float32)
        if masked:
            keep = (rows >= cols) & (dq_ref[...] == dk_ref[...])
            s = jnp.where(keep, s, MASK_VALUE)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(v_ref.dtype), v_ref[...],
                                                      preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    active = kj <= last
    full = full_ref[(b * nq + qi) * nk + jnp.minimum(kj, last)] == 1
    pl.when(active & full)(lambda: compute(masked=False))
    pl.when(active & jnp.logical_not(full))(lambda: compute(masked=True))

    @pl.when(step == pl.num_programs(3) - 1)
    def _store():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


def _block_tables(doc_ids, bq, bk):
    """Per (batch, q block): the first kv block its rows can see (the block holding the start of its first row's
    document), and per (batch, q block, kv block) whether every pair is kept by mask_mod (no mask needed)."""
    batch, seq = doc_ids.shape
    nq, nk = seq // bq, seq // bk
    q_first = jnp.arange(nq) * bq
    doc_q_first = doc_ids[:, ::bq]  # [batch, nq]
    doc_q_last = doc_ids[:, bq - 1::bq]  # [batch, nq]
    # Ids are nondecreasing along a row: a document starts at the count of earlier ids below its own.
    doc_start = jnp.sum(doc_ids[:, None, :] < doc_q_first[:, :, None], axis=-1, dtype=jnp.int32)  # [batch, nq]
    first = lax.div(doc_start, jnp.int32(bk)).astype(jnp.int32)
    k_first = jnp.arange(nk) * bk
    doc_k_first = doc_ids[:, ::bk]  # [batch, nk]
    causal_full = (k_first[None, :] + bk - 1) <= q_first[:, None]  # [nq, nk]
    same_doc = doc_k_first[:, None, :] == doc_q_last[:, :, None]  # [batch, nq, nk]: ids between are equal too
    full = (causal_full[None] & same_doc).astype(jnp.int32)
    return first.reshape(-1), full.reshape(-1)


@functools.partial(jax.jit, static_argnames=("block_q", "block_k"))
def flex_attention(q, k, v, doc_ids, *, block_q: int, block_k: int):
    """q, k, v [batch, heads, seq, head_dim], doc_ids [batch, seq] int32 -> [batch, heads, seq, head_dim]."""
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k, v shapes differ: {q.shape}, {k.shape}, {v.shape}")
    batch, heads, seq, head_dim = q.shape
    bq = _fit(seq, block_q, SUBLANES, "block_q")
    bk = _fit(seq, block_k, LANES, "block_k")
    nq, nk = seq // bq, seq // bk
    doc_ids = doc_ids.astype(jnp.int32)
    first, full = _block_tables(doc_ids, bq, bk)
    slopes = alibi_slopes(heads)

    def q_index(b, h, i, j, first_ref, full_ref, slope_ref):
        return (b, h, i, 0)

    def kv_block(b, i, j, first_ref):
        # From the q block's first visible kv block up to its diagonal block; later steps repeat the diagonal
        # block's index, so they fetch nothing.
        return jnp.minimum(first_ref[b * nq + i] + j, lax.div((i + 1) * bq - 1, bk))

    def kv_index(b, h, i, j, first_ref, full_ref, slope_ref):
        return (b, h, kv_block(b, i, j, first_ref), 0)

    def dq_index(b, h, i, j, first_ref, full_ref, slope_ref):
        return (b, i, 0)

    def dk_index(b, h, i, j, first_ref, full_ref, slope_ref):
        return (b, 0, kv_block(b, i, j, first_ref))

    size = jnp.dtype(q.dtype).itemsize
    pairs = batch * heads * seq * seq // 2
    cost = pl.CostEstimate(flops=4 * pairs * head_dim, transcendentals=2 * pairs,
                           bytes_accessed=size * (2 * q.size + 2 * batch * heads * nq * seq * head_dim // 2))
    kernel = functools.partial(_flex_kernel, sm_scale=1.0 / math.sqrt(head_dim), block_q=bq, block_k=bk,
                               nq=nq, nk=nk)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=3,
        grid=(batch, heads, nq, nk),
        in_specs=[
            pl.BlockSpec((None, None, bq, head_dim), q_index),
            pl.BlockSpec((None, None, bk, head_dim), kv_index),
            pl.BlockSpec((None, None, bk, head_dim), kv_index),
            pl.BlockSpec((None, bq, 1), dq_index),
            pl.BlockSpec((None, 1, bk), dk_index),
        ],
        out_specs=pl.BlockSpec((None, None, bq, head_dim), q_index),
        scratch_shapes=[
            pltpu.VMEM((bq, 1), jnp.float32),
            pltpu.VMEM((bq, 1), jnp.float32),
            pltpu.VMEM((bq, head_dim), jnp.float32),
        ],
    )
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=grid_spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
        cost_estimate=cost,
        interpret=False,
    )(first, full, slopes, q, k, v, doc_ids.reshape(batch, seq, 1), doc_ids.reshape(batch, 1, seq))


def workload(q, k, v, doc_ids, *, block_q: int = 512, block_k: int = 512):
    """The task's flex attention (soft-cap + ALiBi, causal document mask); only the block sizes are tunable."""
    return flex_attention(q, k, v, doc_ids, block_q=block_q, block_k=block_k)
