"""Honest: jax's own splash attention (causal) under jax.vmap over the batch, as the 1p_Flash_Attention kernel.
It compiles for v5e; jax's TPU interpreter cannot run it (its grid randomisation fails under vmap)."""

import math

import jax
from jax.experimental.pallas.ops.tpu import splash_attention as sa


def workload(q, k, v):
    _, heads, seq, head_dim = q.shape  # q, k, v: [batch, heads, seq, head_dim]
    mask = sa.MultiHeadMask([sa.CausalMask((seq, seq)) for _ in range(heads)])
    sizes = sa.BlockSizes(block_q=128, block_kv=128, block_kv_compute=128)
    kernel = sa.make_splash_mha(mask, head_shards=1, q_seq_shards=1, block_sizes=sizes)
    scaled = (q * (1.0 / math.sqrt(head_dim))).astype(q.dtype)
    return jax.vmap(kernel)(scaled, k, v)
