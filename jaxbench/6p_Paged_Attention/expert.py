"""Expert baseline for 6p_Paged_Attention: jax's TPU paged attention (jax.experimental.pallas.ops.tpu.paged_attention),
called with the task's inputs. Not our kernel: the column ours is compared with. The library wants the kv pages
head-major ([num_kv_heads, num_pages, page_size, head_dim]) and does not scale the logits, so the task's
[num_pages, page_size, num_kv_heads, head_dim] pages are transposed (a full pass over the cache, in XLA) and q is
scaled first: the price of calling it on this layout, which the estimate includes."""

import math

import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import paged_attention as library


def workload(q, k_pages, v_pages, lengths, page_indices):
    """q[num_seqs, num_query_heads, head_dim]; pages [num_pages, page_size, num_kv_heads, head_dim]; lengths
    [num_seqs] int32; page_indices [num_seqs, pages_per_seq] int32. Softmax over each sequence's first `length`
    tokens, logits scaled by 1/sqrt(head_dim). 16 pages (256 tokens) per compute block."""
    pages_per_seq = page_indices.shape[1]
    block = math.gcd(pages_per_seq, 16)
    scaled = (q.astype(jnp.float32) * (1.0 / math.sqrt(q.shape[-1]))).astype(q.dtype)
    k = jnp.transpose(k_pages, (2, 0, 1, 3))
    v = jnp.transpose(v_pages, (2, 0, 1, 3))
    return library.paged_attention(scaled, k, v, lengths, page_indices, pages_per_compute_block=block)
