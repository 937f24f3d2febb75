"""rw_dit_attention: full (unmasked) scaled dot-product attention, Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
(Vaswani et al. 2017, eq. 1), as Wan2.1's DiT applies it over every video token with no mask. Written per video and
head over all query rows at once, in float64, with the softmax spelled out (row max, exp of the shifted logits, row
sum) and its normalisation applied after the product with V (out = (e V) / sum e), instead of the baseline's
blocks of query rows with probabilities normalised before the second matmul."""

import math

import numpy as np

BREAKS = (
    "the 1/sqrt(head_dim) softmax scale dropped",
    "the softmax normalisation dropped (p = exp(s - max s), not divided by its row sum)",
    "the softmax normalised over the wrong axis (each key's column summed over a block of query rows)",
)


def reference(q, k, v, *, config):
    batch, heads, seq, head_dim = q.shape
    assert head_dim == config["head_dim"] and heads == config["num_heads"]
    scale = 1.0 / math.sqrt(head_dim)
    out = np.zeros((batch, heads, seq, head_dim))
    for b in range(batch):
        for h in range(heads):
            logits = (q[b, h] @ k[b, h].T) * scale  # [seq_q, seq_k]
            m = np.max(logits, axis=1, keepdims=True)
            e = np.exp(logits - m)
            out[b, h] = (e @ v[b, h]) / np.sum(e, axis=1, keepdims=True)
    return out
