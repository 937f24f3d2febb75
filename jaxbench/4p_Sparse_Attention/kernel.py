"""Pallas TPU kernel for 4p_Sparse_Attention: GQA flash attention under the task's fixed block-sparse causal pattern
(local window, sink block, strided summary blocks), online softmax over the kv tiles a q tile can see.

The pattern depends on seq_len alone, so which kv tiles each q tile sees (and which of them are wholly visible, so
need no mask) is worked out once from the task's `visible` rule at trace time. The grid walks only those tiles: the
list is scalar-prefetched and the k / v index maps read it, so invisible tiles are neither computed nor fetched.
Inside a partly visible tile the rule is applied per element as
    (q >= kv) & (kv >= local_start(q) | kv_is_sink_or_stride(kv))
with local_start and the column flags precomputed from the same rule (no integer division in the kernel)."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {
    "block_q": (128, 256, 512, 1024),
    "block_k": (128, 256, 512),
}

# The task's pattern (CONFIG of 4p_Sparse_Attention), in blocks of seq_len // NUM_BLOCKS tokens.
NUM_BLOCKS, LOCAL_BLOCKS, GLOBAL_BLOCKS, STRIDE_BLOCKS = 32, 3, 1, 8

SUBLANES, LANES = 8, 128
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # q[bq, d] . k[bk, d] -> [bq, bk]


def _fit(seq_len: int, block: int, align: int, name: str) -> int:
    block = min(block, seq_len)
    if seq_len % block:
        raise ValueError(f"{name}={block} does not divide seq_len={seq_len}")
    if block != seq_len and block % align:
        raise ValueError(f"{name}={block} must be a multiple of {align} or all of seq_len={seq_len}")
    return block


def visible(q_idx, kv_idx, seq_len):
    """The task's rule: whether query q_idx may attend to key kv_idx (numpy, broadcasting)."""
    block = seq_len // NUM_BLOCKS
    qb, kb = q_idx // block, kv_idx // block
    pattern = ((qb - kb < LOCAL_BLOCKS) | (kb < GLOBAL_BLOCKS) | (kb % STRIDE_BLOCKS == STRIDE_BLOCKS - 1))
    return (q_idx >= kv_idx) & pattern


def _tables(seq: int, bq: int, bk: int):
    """Static tables: per q tile, the kv tiles it sees (padded by repeating the last), how many, and which are wholly
    visible; per row the first key of its local window; per key whether it is a sink or stride key."""
    if seq % NUM_BLOCKS:
        raise ValueError(f"seq_len {seq} is not a multiple of num_blocks {NUM_BLOCKS}")
    nq, nk = seq // bq, seq // bk
    idx = np.arange(seq)
    lists, fulls = [], []
    for i in range(nq):
        vis = visible(idx[i * bq:(i + 1) * bq, None], idx[None, :], seq).reshape(bq, nk, bk)
        any_vis, all_vis = vis.any(axis=(0, 2)), vis.all(axis=(0, 2))
        tiles = np.nonzero(any_vis)[0]
        lists.append(tiles)
        fulls.append(all_vis[tiles])
    steps = max(len(t) for t in lists)
    kv_list = np.zeros((nq, steps), np.int32)
    full = np.zeros((nq, steps), np.int32)
    count = np.zeros((nq,), np.int32)
    for i, (tiles, f) in enumerate(zip(lists, fulls)):
        n = len(tiles)
        count[i] = n
        kv_list[i, :n], kv_list[i, n:] = tiles, tiles[-1]
        full[i, :n] = f
    block = seq // NUM_BLOCKS
    qb, kb = idx // block, idx // block
    row_lo = ((qb - LOCAL_BLOCKS + 1) * block).astype(np.int32)  # kv >= row_lo  <=>  qb - kb < LOCAL_BLOCKS
    col_ok = ((kb < GLOBAL_BLOCKS) | (kb % STRIDE_BLOCKS == STRIDE_BLOCKS - 1)).astype(np.int32)
    return kv_list.reshape(-1), count, full.reshape(-1), steps, row_lo, col_ok


def _sparse_kernel(kv_ref, count_ref, full_ref, q_ref, k_ref, v_ref, lo_ref, ok_ref, o_ref, m_ref, l_ref, acc_ref,
                   *, sm_scale, block_q, block_k, steps):
    # kv_ref / full_ref [nq * steps]: the kv tile of each step and whether it is wholly visible; count_ref [nq].
    # q_ref / o_ref [block_q, head_dim], k_ref / v_ref [block_k, head_dim], lo_ref [block_q, 1], ok_ref [1, block_k].
    qi, step = pl.program_id(2), pl.program_id(3)

    @pl.when(step == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    slot = qi * steps + step
    kj = kv_ref[slot]
    q_first, k_first = qi * block_q, kj * block_k

    def compute(masked: bool):
        s = lax.dot_general(q_ref[...], k_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32) * sm_scale
        if masked:
            rows = q_first + lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = k_first + lax.broadcasted_iota(jnp.int32, s.shape, 1)
            keep = (rows >= cols) & ((cols >= lo_ref[...]) | (ok_ref[...] != 0))
            s = jnp.where(keep, s, MASK_VALUE)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(v_ref.dtype), v_ref[...],
                                                      preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    active = step < count_ref[qi]
    full = full_ref[slot] == 1
    pl.when(active & full)(lambda: compute(masked=False))
    pl.when(active & jnp.logical_not(full))(lambda: compute(masked=True))

    @pl.when(step == pl.num_programs(3) - 1)
    def _store():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_q", "block_k"))
def sparse_attention(q, k, v, *, block_q: int, block_k: int):
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
    nq = seq // bq
    kv_list, count, full, steps, row_lo, col_ok = _tables(seq, bq, bk)
    visited = int(count.sum())

    # Heads folded into the lane dim (free reshapes): a head is a head_dim-wide lane block of a row.
    q2 = q.reshape(batch, seq, num_q * head_dim)
    k2 = k.reshape(batch, seq, num_kv * head_dim)
    v2 = v.reshape(batch, seq, num_kv * head_dim)

    def q_index(b, h, i, j, kv_ref, count_ref, full_ref):
        return (b, i, h)

    def kv_index(b, h, i, j, kv_ref, count_ref, full_ref):
        # Query head h uses kv head h // group (lax.div: non-negative indices); steps past the count repeat the
        # last visible tile, so they fetch nothing.
        return (b, kv_ref[i * steps + j], lax.div(h, group))

    def lo_index(b, h, i, j, kv_ref, count_ref, full_ref):
        return (i, 0)

    def ok_index(b, h, i, j, kv_ref, count_ref, full_ref):
        return (0, kv_ref[i * steps + j])

    size = jnp.dtype(q.dtype).itemsize
    pairs = batch * num_q * visited * bq * bk
    cost = pl.CostEstimate(flops=4 * pairs * head_dim, transcendentals=pairs,
                           bytes_accessed=size * (2 * q.size + 2 * batch * num_q * visited * bk * head_dim))
    kernel = functools.partial(_sparse_kernel, sm_scale=1.0 / math.sqrt(head_dim), block_q=bq, block_k=bk,
                               steps=steps)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=3,
        grid=(batch, num_q, nq, steps),
        in_specs=[
            pl.BlockSpec((None, bq, head_dim), q_index),
            pl.BlockSpec((None, bk, head_dim), kv_index),
            pl.BlockSpec((None, bk, head_dim), kv_index),
            pl.BlockSpec((bq, 1), lo_index),
            pl.BlockSpec((1, bk), ok_index),
        ],
        out_specs=pl.BlockSpec((None, bq, head_dim), q_index),
        scratch_shapes=[
            pltpu.VMEM((bq, 1), jnp.float32),
            pltpu.VMEM((bq, 1), jnp.float32),
            pltpu.VMEM((bq, head_dim), jnp.float32),
        ],
    )
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q2.shape, q.dtype),
        grid_spec=grid_spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
        cost_estimate=cost,
        interpret=False,
    )(jnp.asarray(kv_list), jnp.asarray(count), jnp.asarray(full), q2, k2, v2,
      jnp.asarray(row_lo).reshape(seq, 1), jnp.asarray(col_ok).reshape(1, seq))
    return out.reshape(batch, seq, num_q, head_dim)


def workload(q, k, v, *, block_q: int = 256, block_k: int = 128):
    """The task's block-sparse causal GQA; only the block sizes are tunable."""
    return sparse_attention(q, k, v, block_q=block_q, block_k=block_k)
