"""5p_Flex_Attention: Llama-3.1-70B-sized flex attention: soft-cap + ALiBi score_mod, causal document mask_mod."""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "llama3_70b_flex_attention",
    "model": "Llama-3.1-70B",
    "operator": "flex_attention",
    "batch": 4,
    "seq_len": 4096,
    "num_heads": 64,
    "head_dim": 128,
    "softcap": 20.0,  # Gemma-2-style tanh soft-capping of the scaled logits
    "mean_documents": 4,  # packed documents per row, on average; boundaries come from the seed
}
SIZES = {"smoke": {"batch": 2, "seq_len": 256, "num_heads": 4, "head_dim": 128}}

# q is drawn wider than k so the scaled logits spread over several units and softmax rows are peaked.
Q_SCALE = 2.0
# Query rows per step of workload's loop. All rows at once would make XLA hold the f32 scores of every head
# (batch * heads * seq^2 * 4 bytes: 16 GiB at full size, more than a v5e's HBM); a block of rows bounds them
# at batch * heads * Q_CHUNK * seq * 4 bytes. Each row's softmax still sees all its keys, so the result is the same.
Q_CHUNK = 256


def alibi_slopes(num_heads):
    """ALiBi's geometric head slopes 2^(-8 (h+1) / num_heads)."""
    return 2.0 ** (-8.0 * (jnp.arange(num_heads, dtype=jnp.float32) + 1) / num_heads)


def score_mod(score, slope, q_idx, kv_idx):
    """Soft-cap the logit, then add the ALiBi distance penalty with the head's slope (all broadcasting, f32)."""
    cap = CONFIG["softcap"]
    return cap * jnp.tanh(score / cap) + slope * (kv_idx - q_idx).astype(score.dtype)


def mask_mod(doc_q, doc_kv, q_idx, kv_idx):
    """Causal, and only within the query's own document."""
    return (q_idx >= kv_idx) & (doc_q == doc_kv)


@partial(jax.jit, static_argnums=(1, 2))  # one compile instead of several eager ops
def document_ids(key, batch, seq_len):
    """[batch, seq_len] int32 ids of packed documents: ragged lengths, nondecreasing along each row."""
    starts = jax.random.uniform(key, (batch, seq_len)) < CONFIG["mean_documents"] / seq_len
    return jnp.cumsum(starts.at[:, 0].set(False), axis=1, dtype=jnp.int32)

# Independent dimensions (sequences and heads attend independently): the TPU estimator may shrink these
# and extrapolate.
PARALLEL_DIMS = ("batch", "num_heads")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (q, k, v [batch, num_heads, seq_len, head_dim], doc_ids [batch, seq_len] int32)."""
    d = dims(CONFIG, SIZES, size)
    shape = (d["batch"], d["num_heads"], d["seq_len"], d["head_dim"])
    kq, kk, kv, kd = keys(seed, 4)
    q = draw(kq, shape, dtype, seed, scale=Q_SCALE)
    k = draw(kk, shape, dtype, seed)
    v = draw(kv, shape, dtype, seed)
    return q, k, v, document_ids(kd, d["batch"], d["seq_len"])


def workload(q, k, v, doc_ids):
    """softmax(score_mod(q k^T / sqrt(head_dim)) masked by mask_mod) v; logits and softmax in f32."""
    batch, num_heads, seq, head_dim = q.shape
    chunk = math.gcd(seq, Q_CHUNK)
    kv_idx = jnp.arange(seq)

    def rows(start):
        qi = jax.lax.dynamic_slice_in_dim(q, start, chunk, axis=2)  # [batch, heads, chunk, head_dim]
        doc_q = jax.lax.dynamic_slice_in_dim(doc_ids, start, chunk, axis=1)  # [batch, chunk]
        q_idx = start + jnp.arange(chunk)
        s = jnp.einsum("bhqd,bhkd->bhqk", qi, k, preferred_element_type=jnp.float32) / math.sqrt(head_dim)
        s = score_mod(s, alibi_slopes(num_heads)[:, None, None], q_idx[:, None], kv_idx[None, :])
        keep = mask_mod(doc_q[:, None, :, None], doc_ids[:, None, None, :], q_idx[:, None], kv_idx[None, :])
        s = jnp.where(keep, s, -jnp.inf)  # the diagonal is always kept, so no row is empty
        p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        p = p / jnp.sum(p, axis=-1, keepdims=True)
        out = jnp.einsum("bhqk,bhkd->bhqd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return out.astype(q.dtype)

    out = jax.lax.map(rows, jnp.arange(0, seq, chunk))  # [seq // chunk, batch, heads, chunk, head_dim]
    return out.transpose(1, 2, 0, 3, 4).reshape(batch, num_heads, seq, head_dim)


def get_flops(size="full"):
    """FLOPs over the (query, key) pairs the mask keeps, for the default seed's documents."""
    d = dims(CONFIG, SIZES, size)
    ids = np.asarray(document_ids(keys(42, 4)[3], d["batch"], d["seq_len"]))
    lengths = np.concatenate([np.bincount(row) for row in ids]).astype(np.int64)
    pairs = int(np.sum(lengths * (lengths + 1) // 2))
    return 4 * d["num_heads"] * pairs * d["head_dim"]
