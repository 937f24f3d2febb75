"""6p_Paged_Attention: Llama-3.1-70B GQA decode, one query token per sequence, KV cache in shuffled pages."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "llama3_70b_paged_attention",
    "model": "Llama-3.1-70B",
    "operator": "paged_attention",
    "num_seqs": 64,
    "max_seq_len": 4096,  # page_size * pages_per_seq
    "num_query_heads": 64,
    "num_kv_heads": 8,
    "head_dim": 128,
    "page_size": 16,
    "pages_per_seq": 256,
}
# The smoke size keeps the full size's 8 query heads per kv head: kernels branch on that ratio (jax's paged
# attention takes another path below 8), and the program checked at the smoke size must be the one priced at full.
SIZES = {"smoke": {"num_seqs": 8, "max_seq_len": 256, "num_query_heads": 16, "num_kv_heads": 2, "head_dim": 128,
                   "page_size": 16, "pages_per_seq": 16}}

# q is drawn wider than k so the scaled logits spread over several units and softmax rows are peaked.
Q_SCALE = 2.0


def sequence_lengths(key, num_seqs, max_seq_len):
    """Ragged cached lengths in [1, max_seq_len], one per sequence."""
    return jax.random.randint(key, (num_seqs,), 1, max_seq_len + 1, dtype=jnp.int32)

# Independent dimensions (each sequence reads its own pages): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("num_seqs",)


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (q, k_pages, v_pages, lengths, page_indices).

    q[num_seqs, num_query_heads, head_dim]; k_pages, v_pages[num_pages, page_size, num_kv_heads, head_dim]
    with num_pages = num_seqs * pages_per_seq; lengths[num_seqs] int32; page_indices[num_seqs, pages_per_seq]
    int32, a random permutation of the page pool, so a sequence's pages are scattered. Entries past a
    sequence's length point at pages holding data that must be masked out.
    """
    d = dims(CONFIG, SIZES, size)
    if d["max_seq_len"] != d["page_size"] * d["pages_per_seq"]:
        raise ValueError(f"max_seq_len {d['max_seq_len']} != page_size {d['page_size']} "
                         f"* pages_per_seq {d['pages_per_seq']}")
    n, pps = d["num_seqs"], d["pages_per_seq"]
    kq, kk, kv, kl, kp = keys(seed, 5)
    q = draw(kq, (n, d["num_query_heads"], d["head_dim"]), dtype, seed, scale=Q_SCALE)
    pages_shape = (n * pps, d["page_size"], d["num_kv_heads"], d["head_dim"])
    k_pages = draw(kk, pages_shape, dtype, seed)
    v_pages = draw(kv, pages_shape, dtype, seed)
    lengths = sequence_lengths(kl, n, d["max_seq_len"])
    page_indices = jax.random.permutation(kp, n * pps).astype(jnp.int32).reshape(n, pps)
    return q, k_pages, v_pages, lengths, page_indices


def workload(q, k_pages, v_pages, lengths, page_indices):
    """Per sequence: softmax(q k^T / sqrt(head_dim)) v over its first `length` cached tokens, gathered from pages."""
    num_seqs, num_q, head_dim = q.shape
    page_size, num_kv = k_pages.shape[1], k_pages.shape[2]
    max_len = page_indices.shape[1] * page_size
    # Gather each sequence's pages in order: [num_seqs, pages_per_seq * page_size, num_kv_heads, head_dim].
    k = k_pages[page_indices].reshape(num_seqs, max_len, num_kv, head_dim)
    v = v_pages[page_indices].reshape(num_seqs, max_len, num_kv, head_dim)
    qg = q.reshape(num_seqs, num_kv, num_q // num_kv, head_dim)
    s = jnp.einsum("nhgd,nkhd->nhgk", qg, k, preferred_element_type=jnp.float32) / math.sqrt(head_dim)
    valid = jnp.arange(max_len)[None, :] < lengths[:, None]
    s = jnp.where(valid[:, None, None, :], s, -jnp.inf)  # lengths >= 1 keeps every row non-empty
    p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    p = p / jnp.sum(p, axis=-1, keepdims=True)
    out = jnp.einsum("nhgk,nkhd->nhgd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return out.reshape(num_seqs, num_q, head_dim).astype(q.dtype)


def get_flops(size="full"):
    """FLOPs over the cached tokens actually attended, for the default seed's lengths."""
    d = dims(CONFIG, SIZES, size)
    total = int(np.sum(np.asarray(sequence_lengths(keys(42, 5)[3], d["num_seqs"], d["max_seq_len"]))))
    return 4 * d["num_query_heads"] * total * d["head_dim"]
