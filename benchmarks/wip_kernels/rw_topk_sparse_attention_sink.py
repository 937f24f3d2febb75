"""Pallas TPU kernel for rw_topk_sparse_attention_sink: each query row's selected keys gathered by DMA, all heads at
once, the sink in the softmax denominator.

One grid step per query row (a sequence's new token, all its query heads). The row's top-k indices are copied to
SMEM; then one DMA per selected key brings its k and its v row (every kv head's columns, [num_kv * head_dim]
contiguous in the cache viewed as [batch, seq_k, num_kv * head_dim]) into VMEM buffers of [topk, num_kv * head_dim],
so the kernel reads exactly the keys the row attends to, once (XLA's program gathers them into HBM first and
reads them again). The row's query heads are spread into a block-diagonal [num_q, num_kv * head_dim] matrix (query
head h only in its kv head's columns), so one MXU product gives every head's logits against its own kv head, and
p @ v gives each head's output in its own columns, folded back to [num_q, head_dim] by a 0/1 matrix.

Softmax in f32: m = max(row max, sink), the sink's exp(sink - m) added to the denominator only; p is fed to the MXU
unnormalised in v's dtype and the output divided by the denominator.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # a[r, c] . b[t, c] -> [r, t]
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
def topk_sparse_attention_sink(q, k, v, sinks, indices):
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


def workload(q, k, v, sinks, indices):
    """softmax over each query row's topk keys (indices) and its head's sink logit, the sink's share dropped,
    times v: [batch, seq_q, num_query_heads, head_dim]."""
    return topk_sparse_attention_sink(q, k, v, sinks, indices)
