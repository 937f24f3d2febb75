"""7p_Ragged_Paged_Attention: Llama-3.1-70B mixed prefill/decode batch over a paged, shuffled KV cache (vLLM-style)."""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "llama3_70b_ragged_paged_attention",
    "model": "Llama-3.1-70B",
    "operator": "ragged_paged_attention",
    "max_num_batched_tokens": 4096,
    "max_num_seqs": 64,
    "num_q_heads": 64,
    "num_kv_heads": 8,
    "head_dim": 128,
    "page_size": 16,
    "pages_per_seq": 256,
    "prefill_fraction": 0.25,  # share of sequences that are (chunked) prefills; the rest decode one token
}
# The smoke size keeps the full size's 8 kv heads (a kernel may loop over them; 16 query heads keep it cheap).
SIZES = {"smoke": {"max_num_batched_tokens": 128, "max_num_seqs": 16, "num_q_heads": 16, "num_kv_heads": 8,
                   "head_dim": 128, "page_size": 16, "pages_per_seq": 8}}

# q is drawn wider than k so the scaled logits spread over several units and softmax rows are peaked.
Q_SCALE = 2.0
# The reference works on (sequence, block of Q_BLOCK query rows) items, so each sequence's pages are
# gathered once per block rather than once per token; ITEMS_PER_STEP bounds the memory of one step.
Q_BLOCK = 32
ITEMS_PER_STEP = 8


@partial(jax.jit, static_argnums=(1, 2, 3))  # one compile instead of many eager ops
def batch_metadata(key, max_tokens, max_seqs, max_kv_len):
    """(kv_lens[max_seqs], cu_q_lens[max_seqs + 1], num_seqs[1]) for a mixed prefill/decode batch.

    Between max_seqs // 2 and max_seqs - 1 sequences are active; at least one is a prefill. Prefills share
    about 3/4 of the token budget, decodes take one token each, and every query sits at the end of its
    sequence's kv range. Slots past num_seqs keep stale one-token entries, so cu_q_lens alone does not
    say where the batch ends; the tokens past cu_q_lens[num_seqs] are padding.
    """
    k_num, k_force, k_kind, k_share, k_ctx = jax.random.split(key, 5)
    slot = jnp.arange(max_seqs)
    num_seqs = jax.random.randint(k_num, (), max_seqs // 2, max_seqs)
    forced = jax.random.randint(k_force, (), 0, num_seqs)
    prefill = jax.random.uniform(k_kind, (max_seqs,)) < CONFIG["prefill_fraction"]
    prefill = (prefill | (slot == forced)) & (slot < num_seqs)
    budget = (3 * max_tokens) // 4 - jnp.sum(~prefill)
    share = jnp.where(prefill, jax.random.uniform(k_share, (max_seqs,), minval=0.2, maxval=1.0), 0.0)
    prefill_len = jnp.floor(share / jnp.sum(share) * budget).astype(jnp.int32)
    q_lens = jnp.where(prefill, jnp.clip(prefill_len, 2, max_kv_len), 1)
    context = jnp.floor(jax.random.uniform(k_ctx, (max_seqs,)) * (max_kv_len - q_lens + 1)).astype(jnp.int32)
    cu_q_lens = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(q_lens, dtype=jnp.int32)])
    return (q_lens + context).astype(jnp.int32), cu_q_lens, num_seqs.astype(jnp.int32).reshape(1)


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs), the layout of jax's TPU kernel.

    queries[max_num_batched_tokens, num_q_heads, head_dim]; kv_pages[num_pages, page_size, 2 * num_kv_heads,
    head_dim] with k head h at index 2h and v head h at 2h + 1; kv_lens[max_num_seqs] int32;
    page_indices[max_num_seqs, pages_per_seq] int32, a random permutation of the page pool
    (num_pages = max_num_seqs * pages_per_seq); cu_q_lens[max_num_seqs + 1] int32; num_seqs[1] int32.
    """
    d = dims(CONFIG, SIZES, size)
    tokens, seqs, pps = d["max_num_batched_tokens"], d["max_num_seqs"], d["pages_per_seq"]
    if 8 * seqs > tokens:
        raise ValueError(f"max_num_seqs {seqs} must be at most max_num_batched_tokens / 8 = {tokens // 8}")
    kq, kkv, kmeta, kpages = keys(seed, 4)
    queries = draw(kq, (tokens, d["num_q_heads"], d["head_dim"]), dtype, seed, scale=Q_SCALE)
    kv_pages = draw(kkv, (seqs * pps, d["page_size"], 2 * d["num_kv_heads"], d["head_dim"]), dtype, seed)
    kv_lens, cu_q_lens, num_seqs = batch_metadata(kmeta, tokens, seqs, pps * d["page_size"])
    page_indices = jax.random.permutation(kpages, seqs * pps).astype(jnp.int32).reshape(seqs, pps)
    return queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs


def workload(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
    """Each token attends causally to its sequence's cached kv (query i of a q_len-token sequence sits at kv
    position kv_len - q_len + i); tokens past cu_q_lens[num_seqs] are padding and output zeros."""
    tokens, num_q, head_dim = queries.shape
    page_size, num_kv = kv_pages.shape[1], kv_pages.shape[2] // 2
    max_seqs, pages_per_seq = page_indices.shape
    kv_len_max = pages_per_seq * page_size
    bq = min(Q_BLOCK, tokens)
    # Every sequence adds at most one partial block, which bounds the item count statically.
    n_items = -(-tokens // bq) + max_seqs

    q_lens = cu_q_lens[1:] - cu_q_lens[:-1]
    blocks = jnp.where(jnp.arange(max_seqs) < num_seqs[0], (q_lens + bq - 1) // bq, 0)
    block_end = jnp.cumsum(blocks)
    item = jnp.arange(n_items)
    item_seq = jnp.minimum(jnp.searchsorted(block_end, item, side="right"), max_seqs - 1)
    rows = (item - (block_end - blocks)[item_seq])[:, None] * bq + jnp.arange(bq)[None, :]  # position in sequence
    q_rows = jnp.clip(cu_q_lens[item_seq][:, None] + rows, 0, tokens - 1)
    # Rows past a sequence's queries (and items past the last) compute junk that is never read back.
    q_pos = jnp.maximum(kv_lens[item_seq][:, None] - q_lens[item_seq][:, None] + rows, 0)

    def attend(args):
        seq, q_row, pos = args
        kv = kv_pages[page_indices[seq]].reshape(kv_len_max, 2 * num_kv, head_dim)
        k, v = kv[:, 0::2], kv[:, 1::2]
        q = queries[q_row].reshape(bq, num_kv, num_q // num_kv, head_dim)
        s = jnp.einsum("qhgd,khd->hgqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(head_dim)
        s = jnp.where(jnp.arange(kv_len_max)[None, :] <= pos[:, None], s, -jnp.inf)
        p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        p = p / jnp.sum(p, axis=-1, keepdims=True)
        o = jnp.einsum("hgqk,khd->qhgd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return o.reshape(bq, num_q, head_dim)

    out_items = lax.map(attend, (item_seq, q_rows, q_pos), batch_size=ITEMS_PER_STEP)
    # Read each token's row back from the item that computed it.
    t = jnp.arange(tokens)
    seq = jnp.minimum(jnp.searchsorted(cu_q_lens[1:], t, side="right"), max_seqs - 1)
    pos = t - cu_q_lens[seq]
    which = jnp.clip((block_end - blocks)[seq] + pos // bq, 0, n_items - 1)
    out = out_items[which, jnp.clip(pos, 0) % bq]
    valid = t < cu_q_lens[num_seqs[0]]
    return jnp.where(valid[:, None, None], out, 0.0).astype(queries.dtype)


def get_flops(size="full"):
    """FLOPs over the (query, key) pairs the causal mask keeps, for the default seed's batch."""
    d = dims(CONFIG, SIZES, size)
    meta = batch_metadata(keys(42, 4)[2], d["max_num_batched_tokens"], d["max_num_seqs"],
                          d["pages_per_seq"] * d["page_size"])
    kv_lens, cu, n = (np.asarray(m).astype(np.int64) for m in meta)
    q, kv = (cu[1:] - cu[:-1])[: n[0]], kv_lens[: n[0]]
    pairs = int(np.sum(q * (kv - q) + q * (q + 1) // 2))
    return 4 * d["num_q_heads"] * pairs * d["head_dim"]
