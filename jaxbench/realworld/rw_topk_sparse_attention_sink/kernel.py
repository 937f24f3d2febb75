"""Pallas TPU kernels for rw_topk_sparse_attention_sink: GQA over each query row's selected keys, with the head's
sink logit in the softmax denominator. Two paths, chosen by the number of query rows:

- Prefill (many rows, `seq_q >= DENSE_MIN_ROWS`): a dense, masked flash kernel. A row selects 2048 of the 8K-16K
  keys it can see, so computing every visible key block once per query block costs 4-8x the selected FLOPs, at
  full MXU shape and reading k and v once per query block, where gathering 2048 keys for every row would move
  32 GiB of k and v. The selection becomes a [batch, seq_q, seq_k] int8 mask (a scatter of the indices, done in
  XLA: index bookkeeping, no FLOPs); grid (batch, kv head, query block, key block), the key-block axis carrying an
  online softmax that starts from the sink (m = sink, l = 1, so the sink is in every row's denominator), and key
  blocks past the query block's last position skipped (never fetched: their index maps repeat the last visible
  block). The kv head's query heads are one [group * block_q, head_dim] matrix (q viewed as [batch, heads, seq_q,
  head_dim]), so each step is two MXU products against one [block_k, head_dim] tile.
- Decode (a few rows): one grid step per query row; the row's indices are copied to SMEM, then one DMA per selected
  key brings its k and v row into VMEM, so only the selected keys are read. A one-row DMA into or out of a 2-D ref
  is refused by Mosaic (HBM arrays are tiled too), so the cache is viewed as [batch, seq_k, 1, kv_cols] and the
  buffers are [topk, 1, kv_cols] (each row padded to a tile: 32 MiB for k and v at topk 2048). The row's query
  heads are spread block-diagonally over the kv heads' columns, so one product gives every head's logits.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # a[r, c] . b[t, c] -> [r, t]
# Below this many query rows a sequence takes the gather path.
DENSE_MIN_ROWS = 64
# Finite, so a masked logit gives exp(MASK - m) = 0, never the NaN of (-inf) - (-inf).
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
TUNABLES = {"block_q": (64, 128, 256), "block_k": (128, 256, 512)}
# A [topk, 1, cols] buffer pads each gathered row to a whole tile: k and v take 32 MiB at topk 2048.
VMEM_LIMIT = 64 * 1024 * 1024


def _sink_kernel(idx_hbm, q_ref, sink_ref, expand_ref, fold_ref, k_hbm, v_hbm, o_ref, idx_smem, kbuf, vbuf, sems,
                 *, topk, group, head_dim, scale):
    # q_ref / o_ref: [num_q, head_dim]; sink_ref: [num_q, 1] f32; expand_ref [head_dim, kv_cols]; fold_ref
    # [kv_cols, head_dim] f32; k_hbm / v_hbm: [batch, seq_k, kv_cols] in HBM; kbuf / vbuf: [topk, kv_cols]
    b, i = pl.program_id(0), pl.program_id(1)
    kv_cols = fold_ref.shape[0]
    rows_copy = pltpu.make_async_copy(idx_hbm.at[b, i], idx_smem, sems.at[0])
    rows_copy.start()
    rows_copy.wait()

    def key_copies(t, j):
        return (pltpu.make_async_copy(k_hbm.at[b, j], kbuf.at[t], sems.at[1]),
                pltpu.make_async_copy(v_hbm.at[b, j], vbuf.at[t], sems.at[2]))

    def start(t, carry):
        for c in key_copies(t, idx_smem[t]):
            c.start()
        return carry

    def wait(t, carry):
        for c in key_copies(t, 0):
            c.wait()
        return carry

    lax.fori_loop(0, topk, start, 0)

    # the block-diagonal query while the keys arrive
    q_rep = jnp.dot(q_ref[...], expand_ref[...], preferred_element_type=jnp.float32)  # [num_q, kv_cols]
    rows = lax.broadcasted_iota(jnp.int32, q_rep.shape, 0)
    cols = lax.broadcasted_iota(jnp.int32, q_rep.shape, 1)
    own = lax.div(rows, group) == lax.div(cols, head_dim)  # query head r reads kv head r // group
    qbd = jnp.where(own, q_rep, 0.0).astype(kbuf.dtype)

    lax.fori_loop(0, topk, wait, 0)
    s = lax.dot_general(qbd, kbuf[...].reshape(topk, kv_cols), _CONTRACT_LAST, preferred_element_type=jnp.float32) * scale  # [num_q, topk]
    sink = sink_ref[...]
    m = jnp.maximum(jnp.max(s, axis=-1, keepdims=True), sink)
    p = jnp.exp(s - m)
    denom = jnp.sum(p, axis=-1, keepdims=True) + jnp.exp(sink - m)
    acc = jnp.dot(p.astype(vbuf.dtype), vbuf[...].reshape(topk, kv_cols), preferred_element_type=jnp.float32)  # [num_q, kv_cols]
    acc = jnp.where(own, acc, 0.0) / denom
    out = jnp.dot(acc, fold_ref[...], preferred_element_type=jnp.float32, precision=lax.Precision.HIGHEST)
    o_ref[...] = out.astype(o_ref.dtype)


@jax.jit
def gathered(q, k, v, sinks, indices):
    batch, seq_q, num_q, head_dim = q.shape
    _, seq_k, num_kv, head_dim_k = k.shape
    topk = indices.shape[-1]
    if head_dim_k != head_dim or v.shape != k.shape or k.shape[0] != batch:
        raise ValueError(f"shapes disagree: q {q.shape}, k {k.shape}, v {v.shape}")
    if num_q % num_kv or sinks.shape != (num_q,) or indices.shape[:2] != (batch, seq_q):
        raise ValueError(f"heads or indices disagree: q {q.shape}, k {k.shape}, sinks {sinks.shape}, "
                         f"indices {indices.shape}")
    group = num_q // num_kv
    kv_cols = num_kv * head_dim
    kf = k.reshape(batch, seq_k, 1, kv_cols)  # a key's every kv head is one row, its own tile
    vf = v.reshape(batch, seq_k, 1, kv_cols)
    expand = jnp.tile(jnp.eye(head_dim, dtype=q.dtype), (1, num_kv))  # [head_dim, kv_cols]
    fold = jnp.tile(jnp.eye(head_dim, dtype=jnp.float32), (num_kv, 1))  # [kv_cols, head_dim]
    sink = sinks.astype(jnp.float32).reshape(num_q, 1)
    whole = lambda b, i: (0, 0)  # noqa: E731
    row = pl.BlockSpec((None, None, num_q, head_dim), lambda b, i: (b, i, 0, 0))
    any_space = pl.BlockSpec(memory_space=pltpu.HBM)
    size = jnp.dtype(q.dtype).itemsize
    pairs = batch * seq_q * topk
    kernel = functools.partial(_sink_kernel, topk=topk, group=group, head_dim=head_dim,
                               scale=1.0 / math.sqrt(head_dim))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(batch, seq_q),
        in_specs=[any_space, row, pl.BlockSpec((num_q, 1), whole), pl.BlockSpec((head_dim, kv_cols), whole),
                  pl.BlockSpec((kv_cols, head_dim), whole), any_space, any_space],
        out_specs=row,
        scratch_shapes=[pltpu.SMEM((topk,), jnp.int32), pltpu.VMEM((topk, 1, kv_cols), k.dtype),
                        pltpu.VMEM((topk, 1, kv_cols), v.dtype), pltpu.SemaphoreType.DMA((3,))],
        # query rows are independent: each step gathers, uses and leaves its own keys
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"),
                                             vmem_limit_bytes=VMEM_LIMIT),
        cost_estimate=pl.CostEstimate(flops=4 * pairs * num_q * kv_cols, transcendentals=pairs * num_q,
                                      bytes_accessed=size * (2 * q.size + 2 * pairs * kv_cols) + 4 * pairs),
        interpret=False,
    )(indices.astype(jnp.int32), q, sink, expand, fold, kf, vf)


def _dense_kernel(q_ref, k_ref, v_ref, mask_ref, sink_ref, o_ref, m_ref, l_ref, acc_ref, *, block_q, block_k,
                  first_row, scale):
    # q_ref / o_ref: [group, block_q, head_dim]; k_ref / v_ref: [block_k, head_dim]; mask_ref: [block_q, block_k]
    # int8; sink_ref: [group, 1, 1] f32; scratch m / l: [group * block_q, 1], acc: [group * block_q, head_dim]
    qi, ki = pl.program_id(2), pl.program_id(3)
    group, _, head_dim = q_ref.shape
    rows = group * block_q

    @pl.when(ki == 0)
    def _init():  # the sink as the first logit of every row: m = sink, l = exp(sink - sink)
        sink = jnp.broadcast_to(sink_ref[...], (group, block_q, 1)).reshape(rows, 1)
        m_ref[...] = sink
        l_ref[...] = jnp.ones_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    last_pos = first_row + (qi + 1) * block_q - 1  # the block's last row's position: it sees keys 0 .. last_pos

    @pl.when(ki * block_k <= last_pos)
    def _step():
        q = q_ref[...].reshape(rows, head_dim)
        s = lax.dot_general(q, k_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32) * scale
        chosen = jnp.broadcast_to(mask_ref[...][None] != 0, (group, block_q, block_k)).reshape(rows, block_k)
        s = jnp.where(chosen, s, MASK_VALUE)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(v_ref.dtype), v_ref[...],
                                                      preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    @pl.when(ki == pl.num_programs(3) - 1)
    def _store():
        o_ref[...] = (acc_ref[...] / l_ref[...]).reshape(group, block_q, head_dim).astype(o_ref.dtype)


def _fit(n, want, unit):
    """The largest multiple of `unit` dividing n that is at most `want` (n itself when none is)."""
    b = (min(want, n) // unit) * unit
    while b >= unit:
        if n % b == 0:
            return b
        b -= unit
    return n


@functools.partial(jax.jit, static_argnames=("block_q", "block_k"))
def dense_masked(q, k, v, sinks, indices, *, block_q: int, block_k: int):
    batch, seq_q, num_q, head_dim = q.shape
    _, seq_k, num_kv, _ = k.shape
    topk = indices.shape[-1]
    if block_q <= 0 or block_k <= 0:
        raise ValueError(f"block_q={block_q} and block_k={block_k} must be positive")
    group = num_q // num_kv
    bq, bk = _fit(seq_q, block_q, 16), _fit(seq_k, block_k, 128)
    nq, nk = seq_q // bq, seq_k // bk
    first_row = seq_k - seq_q  # query row i sits at position first_row + i
    # the selection as a mask: index bookkeeping (no FLOPs), the attention is the kernel's
    rows_at = jnp.arange(seq_q, dtype=jnp.int32)[None, :, None]
    seqs_at = jnp.arange(batch, dtype=jnp.int32)[:, None, None]
    mask = jnp.zeros((batch, seq_q, seq_k), jnp.int8).at[seqs_at, rows_at, indices].set(1, unique_indices=True)
    qt = jnp.swapaxes(q, 1, 2)  # [batch, num_q, seq_q, head_dim]: a kv head's query heads are rows of one block
    kt = jnp.swapaxes(k, 1, 2)  # [batch, num_kv, seq_k, head_dim]
    vt = jnp.swapaxes(v, 1, 2)
    sink = sinks.astype(jnp.float32).reshape(num_kv, group, 1, 1)

    def key_block(b, h, qi, ki):  # blocks past the query block's last position repeat the last visible one
        last = lax.div(first_row + (qi + 1) * bq - 1, bk)
        return (b, h, jnp.minimum(ki, last), 0)

    q_spec = pl.BlockSpec((None, group, bq, head_dim), lambda b, h, qi, ki: (b, h, qi, 0))
    kv_spec = pl.BlockSpec((None, None, bk, head_dim), key_block)
    size = jnp.dtype(q.dtype).itemsize
    out = pl.pallas_call(
        functools.partial(_dense_kernel, block_q=bq, block_k=bk, first_row=first_row,
                          scale=1.0 / math.sqrt(head_dim)),
        out_shape=jax.ShapeDtypeStruct(qt.shape, q.dtype),
        grid=(batch, num_kv, nq, nk),
        in_specs=[q_spec, kv_spec, kv_spec,
                  pl.BlockSpec((None, bq, bk), lambda b, h, qi, ki: (b, qi, key_block(b, h, qi, ki)[2])),
                  pl.BlockSpec((None, group, 1, 1), lambda b, h, qi, ki: (h, 0, 0, 0))],
        out_specs=q_spec,
        scratch_shapes=[pltpu.VMEM((group * bq, 1), jnp.float32), pltpu.VMEM((group * bq, 1), jnp.float32),
                        pltpu.VMEM((group * bq, head_dim), jnp.float32)],
        # sequences, kv heads and query blocks are independent; the key-block axis carries the softmax
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(flops=4 * batch * seq_q * num_q * seq_k * head_dim,
                                      transcendentals=batch * seq_q * num_q * seq_k,
                                      bytes_accessed=size * (2 * q.size + nq * (k.size + v.size))
                                      + batch * seq_q * seq_k),
    )(qt, kt, vt, mask, sink)
    return jnp.swapaxes(out, 1, 2)


def workload(q, k, v, sinks, indices, *, block_q: int = 256, block_k: int = 256):
    """softmax over each query row's topk keys (indices) and its head's sink logit, the sink's share dropped,
    times v: [batch, seq_q, num_query_heads, head_dim]."""
    if q.shape[1] >= DENSE_MIN_ROWS:
        return dense_masked(q, k, v, sinks, indices, block_q=block_q, block_k=block_k)
    return gathered(q, k, v, sinks, indices)
