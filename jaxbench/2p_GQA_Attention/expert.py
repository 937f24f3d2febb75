"""Expert baseline for 2p_GQA_Attention: jax's TPU splash attention (jax.experimental.pallas.ops.tpu.splash_attention)
with a causal mask, its kv heads shared by groups of q heads as the task's are. Not our kernel: the column ours is
compared with. The library wants [heads, seq, head_dim] per batch row and does not scale the logits, so q, k, v are
transposed and q scaled first (XLA passes the estimate includes)."""

import math

import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks


def _block(n: int, want: int) -> int:
    """The largest of want, want/2, ... 128 that divides n; n itself when none does."""
    while want >= 128:
        if n % want == 0:
            return want
        want //= 2
    return n


def workload(q, k, v):
    """q[batch, seq, num_query_heads, head_dim], k and v [batch, seq, num_kv_heads, head_dim]; causal; q head h
    reads kv head h // (num_query_heads // num_kv_heads). Batch rows are folded into the heads (q head b * num_q + h
    then reads kv head b * num_kv + h // group, the same pairing), so one kernel call covers the batch. 256-row
    blocks at every size: blocks that follow the size change the library's kernel with it, and the program priced at
    full size would not be the one checked."""
    batch, seq, num_q, head_dim = q.shape
    num_kv = k.shape[2]
    b = _block(seq, 256)
    mask = masks.MultiHeadMask([masks.CausalMask((seq, seq)) for _ in range(batch * num_q)])
    sizes = splash.BlockSizes(block_q=b, block_kv=b, block_kv_compute=b)
    kernel = splash.make_splash_mha_single_device(mask, block_sizes=sizes)
    scaled = (q.astype(jnp.float32) * (1.0 / math.sqrt(head_dim))).astype(q.dtype)

    def heads_first(x, heads):  # [batch * heads, seq, head_dim]
        return jnp.transpose(x, (0, 2, 1, 3)).reshape(batch * heads, seq, head_dim)

    out = kernel(heads_first(scaled, num_q), heads_first(k, num_kv), heads_first(v, num_kv))
    return jnp.transpose(out.reshape(batch, num_q, seq, head_dim), (0, 2, 1, 3))
