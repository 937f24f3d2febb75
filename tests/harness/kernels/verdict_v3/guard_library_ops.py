"""Honest (verdict v3): imports jax's own Pallas TPU ops after the guard is armed (their lazy imports, dataclasses
and lowering rules must all pass) and uses flash attention as the 1p_Flash_Attention kernel."""

import math

from jax.experimental.pallas.ops.tpu import flash_attention as fa
from jax.experimental.pallas.ops.tpu import matmul  # noqa: F401
from jax.experimental.pallas.ops.tpu.megablox import gmm  # noqa: F401
from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention_kernel  # noqa: F401
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import kernel as rpa  # noqa: F401
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel  # noqa: F401
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask  # noqa: F401


def workload(q, k, v):
    head_dim = q.shape[-1]
    sizes = fa.BlockSizes(block_q=128, block_k_major=128, block_k=128, block_b=1)
    return fa.flash_attention(q, k, v, causal=True, sm_scale=1.0 / math.sqrt(head_dim), block_sizes=sizes)
