"""Expert baseline for 7p_Ragged_Paged_Attention: jax's TPU ragged paged attention
(jax.experimental.pallas.ops.tpu.ragged_paged_attention), called with the task's inputs, which are in its layout.
Not our kernel: the column ours is compared with."""

import math

import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import ragged_paged_attention as library


def workload(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
    """queries[tokens, num_q_heads, head_dim]; kv_pages[num_pages, page_size, 2 * num_kv_heads, head_dim] (k and v
    heads interleaved); causal within each sequence's cached kv. Tokens past cu_q_lens[num_seqs] are padding: the
    task gives them zeros, which the library does not promise, so they are zeroed here. Block sizes are given:
    the library's tuned table is looked up by the attached device's kind, and here the chip is not attached (16 kv
    pages and 32 queries per block). jax's TPU interpreter cannot run this kernel (a reshape of a ref it does not
    model), so off a TPU its verdict is unverifiable_on_cpu and it is not priced."""
    pages_per_seq = page_indices.shape[1]
    out = library.ragged_paged_attention(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                                         sm_scale=1.0 / math.sqrt(queries.shape[-1]),
                                         num_kv_pages_per_block=math.gcd(pages_per_seq, 16),
                                         num_queries_per_block=min(32, queries.shape[0]))
    valid = jnp.arange(queries.shape[0]) < cu_q_lens[num_seqs[0]]
    return jnp.where(valid[:, None, None], out, 0).astype(queries.dtype)
