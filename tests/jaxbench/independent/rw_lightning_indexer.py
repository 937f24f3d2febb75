"""rw_lightning_indexer: DeepSeek-V3.2's lightning indexer (DeepSeek-V3.2-Exp report, eq. 1: I_{t,s} = sum_j w_{t,j}
ReLU(q_{t,j} . k_s), then each query's top-k keys under the causal mask), with the weights scaled by
(n_heads * head_dim)^-1/2 as the model's inference code applies them. Written per query row and per head as a sum
of ReLU'd dots over explicit loops (not one batched einsum with a -inf mask), each row scoring only the keys it may
see (query row i is absolute position seq_k - seq_q + i and sees keys 0..that position); the row's selection is a
full descending sort of its visible scores cut to index_topk, zero-filled where it sees fewer keys (the task's
output convention: it returns the selected scores, not the tie-ambiguous indices, so the sorted scores are
compared element-wise and a wrong selection changes them)."""

import numpy as np

INDEX_TOPK = 2048  # DeepSeek-V3.2's index_topk, fixed at every size (the baseline's CONFIG)

BREAKS = (
    "the ReLU dropped (raw q.k summed over heads)",
    "the causal mask dropped (every row scores all keys; fails at prefill)",
    "the causal mask off by one (s < t: a row no longer scores its own key)",
    "the per-head weights w dropped (heads summed unweighted)",
)


def reference(q, k, w, *, config):
    batch, seq_q, heads, head_dim = q.shape
    seq_k = k.shape[1]
    topk = min(config.get("index_topk", INDEX_TOPK), seq_k)
    scale = (heads * head_dim) ** -0.5
    out = np.zeros((batch, seq_q, topk))
    for b in range(batch):
        for i in range(seq_q):
            pos = seq_k - seq_q + i
            keys = k[b, : pos + 1]  # [pos + 1, head_dim]: the keys this row may see
            score = np.zeros(pos + 1)
            for j in range(heads):
                score += w[b, i, j] * np.maximum(keys @ q[b, i, j], 0.0)
            score *= scale
            top = np.sort(score)[::-1][:topk]
            out[b, i, : top.size] = top
    return out
