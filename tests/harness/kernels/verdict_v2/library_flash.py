"""Honest: jax's own Pallas TPU flash attention used as the 1p_Flash_Attention kernel (causal, 1/sqrt(d))."""

import math

from jax.experimental.pallas.ops.tpu import flash_attention as fa


def workload(q, k, v):
    head_dim = q.shape[-1]
    sizes = fa.BlockSizes(block_q=128, block_k_major=128, block_k=128, block_b=1)
    return fa.flash_attention(q, k, v, causal=True, sm_scale=1.0 / math.sqrt(head_dim), block_sizes=sizes)
