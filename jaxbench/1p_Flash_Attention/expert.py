"""Expert baseline for 1p_Flash_Attention: jax's own TPU flash attention (jax.experimental.pallas.ops.tpu),
called in the task's layout, which is the library's. Not our kernel: the column ours is compared with."""

import math

from jax.experimental.pallas.ops.tpu import flash_attention as library


def _block(n: int, want: int) -> int:
    """The largest of want, want/2, ... 128 that divides n; n itself when none does (a block may be the whole dim)."""
    while want >= 128:
        if n % want == 0:
            return want
        want //= 2
    return n


def workload(q, k, v):
    """q, k, v: [batch, num_heads, seq_len, head_dim]; causal, logits scaled by 1/sqrt(head_dim).
    256-row blocks at every size (the library's default of 128 re-reads k and v twice as often; blocks that follow
    the size change the library's kernel body with it, and the program priced at full size would not be the one
    checked at the smaller ones)."""
    b = _block(q.shape[2], 256)
    sizes = library.BlockSizes(block_q=b, block_k_major=b, block_k=b, block_b=1)
    return library.flash_attention(q, k, v, causal=True, sm_scale=1.0 / math.sqrt(q.shape[-1]), block_sizes=sizes)
