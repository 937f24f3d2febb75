"""Held-in port source: scaled dot-product attention with an optional causal mask, as one torch function
(q, k, v: [batch, heads, seq, head_dim]); the softmax runs in float32."""

import torch


def attention(q, k, v, causal: bool = True):
    seq = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if causal:
        above = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(above, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs, v)
