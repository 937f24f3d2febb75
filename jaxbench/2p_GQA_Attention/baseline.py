"""2p_GQA_Attention: Llama-3.1-405B causal grouped-query attention, q/k/v laid out [batch, seq, heads, head_dim]."""

import math

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "llama3_405b_gqa_attention",
    "model": "Llama-3.1-405B",
    "operator": "gqa_attention",
    "batch": 4,
    "seq_len": 4096,
    "num_query_heads": 128,
    "num_kv_heads": 8,
    "head_dim": 128,
    "emb_dim": 16384,  # num_query_heads * head_dim: the model width the projected q comes from
}
SIZES = {"smoke": {"batch": 2, "seq_len": 128, "num_query_heads": 8, "num_kv_heads": 2, "head_dim": 128,
                   "emb_dim": 1024}}

# q is drawn wider than k so the scaled logits spread over several units and softmax rows are peaked.
Q_SCALE = 2.0
# Query rows per step of workload's loop. All rows at once would make XLA hold the f32 scores of every head
# (batch * heads * seq^2 * 4 bytes: 32 GiB at full size, more than a v5e's HBM); a block of rows bounds them
# at batch * heads * Q_CHUNK * seq * 4 bytes. Each row's softmax still sees all its keys, so the result is the same.
Q_CHUNK = 256

# Independent dimensions (sequences and query heads attend independently; the KV heads they share are read either way): the TPU estimator may shrink these
# and extrapolate.
PARALLEL_DIMS = ("batch", "num_query_heads")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (q[batch, seq, num_query_heads, head_dim], k and v [batch, seq, num_kv_heads, head_dim])."""
    d = dims(CONFIG, SIZES, size)
    kq, kk, kv = keys(seed, 3)
    q = draw(kq, (d["batch"], d["seq_len"], d["num_query_heads"], d["head_dim"]), dtype, seed, scale=Q_SCALE)
    kv_shape = (d["batch"], d["seq_len"], d["num_kv_heads"], d["head_dim"])
    k = draw(kk, kv_shape, dtype, seed)
    v = draw(kv, kv_shape, dtype, seed)
    return q, k, v


def workload(q, k, v):
    """Causal softmax(q k^T / sqrt(head_dim)) v, each kv head shared by num_query_heads // num_kv_heads q heads."""
    batch, seq, num_q, head_dim = q.shape
    num_kv = k.shape[2]
    chunk = math.gcd(seq, Q_CHUNK)

    def rows(start):
        # Query head h uses kv head h // group, the Llama/MaxText grouping.
        qg = jax.lax.dynamic_slice_in_dim(q, start, chunk, axis=1).reshape(
            batch, chunk, num_kv, num_q // num_kv, head_dim)
        s = jnp.einsum("bqhgd,bkhd->bhgqk", qg, k, preferred_element_type=jnp.float32) / math.sqrt(head_dim)
        causal = (start + jnp.arange(chunk))[:, None] >= jnp.arange(seq)[None, :]
        s = jnp.where(causal, s, -jnp.inf)
        p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        p = p / jnp.sum(p, axis=-1, keepdims=True)
        out = jnp.einsum("bhgqk,bkhd->bqhgd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return out.reshape(batch, chunk, num_q, head_dim).astype(q.dtype)

    out = jax.lax.map(rows, jnp.arange(0, seq, chunk))  # [seq // chunk, batch, chunk, num_q, head_dim]
    return out.transpose(1, 0, 2, 3, 4).reshape(batch, seq, num_q, head_dim)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    pairs = d["seq_len"] * (d["seq_len"] + 1) // 2  # causal (query, key) pairs
    return 4 * d["batch"] * d["num_query_heads"] * pairs * d["head_dim"]
