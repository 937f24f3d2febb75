"""rw_topk_sparse_attention_sink: top-k sparse GQA (DeepSeek-V3.2's DSA: each query attends only to the keys its
indices select) with gpt-oss's attention sink as gpt-oss's reference sdpa defines it: a learned per-head logit
appended to the row's scaled scores q.k_j / sqrt(head_dim), softmaxed together, the sink's column then dropped, so
the sink enters the denominator only. Query head h reads kv head h // (num_query_heads / num_kv_heads). Written as a
Python loop over (sequence, query row) that gathers that row's selected keys and values and forms the weights as
exp(s_j - m) / (sum_j exp(s_j - m) + exp(sink - m)) in float64, instead of the baseline's chunked batched einsums."""

import numpy as np

BREAKS = (
    "the sink dropped from the softmax denominator",
    "one sink shared by all heads (the mean sink logit in every head's denominator)",
    "the kv head grouping changed (query head h reading kv head h % num_kv_heads)",
)


def reference(q, k, v, sinks, indices, *, config):
    batch, seq_q, num_q, head_dim = q.shape
    num_kv = k.shape[2]
    group = num_q // num_kv
    kv_of = np.arange(num_q) // group  # query head -> kv head
    out = np.zeros_like(q)
    for b in range(batch):
        for i in range(seq_q):
            idx = indices[b, i]
            ks = k[b, idx][:, kv_of, :]  # [topk, num_q, head_dim]: each query head's kv head's selected keys
            vs = v[b, idx][:, kv_of, :]
            s = np.einsum("hd,jhd->hj", q[b, i], ks) / np.sqrt(head_dim)  # [num_q, topk]
            m = np.maximum(s.max(axis=1), sinks)  # [num_q]
            e = np.exp(s - m[:, None])
            denom = e.sum(axis=1) + np.exp(sinks - m)
            out[b, i] = np.einsum("hj,jhd->hd", e / denom[:, None], vs)
    return out
