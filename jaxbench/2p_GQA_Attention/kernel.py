"""Pallas TPU kernel for 2p_GQA_Attention: causal grouped-query flash attention on the [batch, seq, heads, head_dim]
layout, online softmax over kv blocks; each q head reads its kv head's tiles through the index map (no repeat)."""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Per grid step one [block_q, block_k] f32 logit tile and its exponentials live in VMEM (2 MiB at 1024 x 512);
# the q / o tiles are [block_q, head_dim], the k / v tiles [block_k, head_dim].
TUNABLES = {
    "block_q": (128, 256, 512, 1024),
    "block_k": (128, 256, 512, 1024),
}

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


def _gqa_kernel(q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, sm_scale, block_q, block_k):
    # q_ref / o_ref: [block_q, head_dim] (one q head), k_ref / v_ref: [block_k, head_dim] (its kv head)
    qi, kj = pl.program_id(2), pl.program_id(3)

    @pl.when(kj == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    q_first, k_first = qi * block_q, kj * block_k
    q_last, k_last = q_first + block_q - 1, k_first + block_k - 1

    def step(masked: bool):
        s = lax.dot_general(q_ref[...], k_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32) * sm_scale
        if masked:
            rows = q_first + lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = k_first + lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(cols <= rows, s, MASK_VALUE)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(v_ref.dtype), v_ref[...],
                                                      preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    # kv blocks wholly above the diagonal are skipped (and not fetched: see kv_index); only the blocks the
    # diagonal crosses pay for the mask.
    pl.when(k_last <= q_first)(lambda: step(masked=False))
    pl.when((k_first <= q_last) & (k_last > q_first))(lambda: step(masked=True))

    @pl.when(kj == pl.num_programs(3) - 1)
    def _store():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_q", "block_k"))
def gqa_attention(q, k, v, *, block_q: int, block_k: int):
    """q [batch, seq, num_q, head_dim], k / v [batch, seq, num_kv, head_dim] -> [batch, seq, num_q, head_dim]."""
    batch, seq, num_q, head_dim = q.shape
    num_kv = k.shape[2]
    if k.shape != v.shape or k.shape[:2] != q.shape[:2] or k.shape[3] != head_dim or num_q % num_kv:
        raise ValueError(f"bad GQA shapes q {q.shape}, k {k.shape}, v {v.shape}")
    if head_dim % LANES:
        raise ValueError(f"head_dim={head_dim} must be a multiple of {LANES}")
    group = num_q // num_kv
    bq = _fit(seq, block_q, SUBLANES, "block_q")
    bk = _fit(seq, block_k, LANES, "block_k")
    grid = (batch, num_q, seq // bq, seq // bk)

    # Heads folded into the lane dim (free reshapes): a head is a head_dim-wide lane block of a row.
    q2 = q.reshape(batch, seq, num_q * head_dim)
    k2 = k.reshape(batch, seq, num_kv * head_dim)
    v2 = v.reshape(batch, seq, num_kv * head_dim)

    def q_index(b, h, i, j):
        return (b, i, h)

    def kv_index(b, h, i, j):
        # Query head h uses kv head h // group. Past the last kv block this q block needs, keep pointing at that
        # block: an unchanged block index means no new DMA for the skipped steps. lax.div: non-negative indices.
        j = jnp.minimum(j, lax.div((i + 1) * bq - 1, bk))
        return (b, j, lax.div(h, group))

    size = jnp.dtype(q.dtype).itemsize
    pairs = batch * num_q * seq * seq // 2
    kv_reads = batch * num_q * (seq // bq) * seq * head_dim // 2
    cost = pl.CostEstimate(
        flops=4 * pairs * head_dim,
        transcendentals=pairs,
        bytes_accessed=size * (2 * q.size + 2 * kv_reads),
    )
    kernel = functools.partial(_gqa_kernel, sm_scale=1.0 / math.sqrt(head_dim), block_q=bq, block_k=bk)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q2.shape, q.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((None, bq, head_dim), q_index),
            pl.BlockSpec((None, bk, head_dim), kv_index),
            pl.BlockSpec((None, bk, head_dim), kv_index),
        ],
        out_specs=pl.BlockSpec((None, bq, head_dim), q_index),
        scratch_shapes=[
            pltpu.VMEM((bq, 1), jnp.float32),
            pltpu.VMEM((bq, 1), jnp.float32),
            pltpu.VMEM((bq, head_dim), jnp.float32),
        ],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
        cost_estimate=cost,
        interpret=False,
    )(q2, k2, v2)
    return out.reshape(batch, seq, num_q, head_dim)


def workload(q, k, v, *, block_q: int = 512, block_k: int = 512):
    """The task's causal GQA; only the block sizes are tunable."""
    return gqa_attention(q, k, v, block_q=block_q, block_k=block_k)
