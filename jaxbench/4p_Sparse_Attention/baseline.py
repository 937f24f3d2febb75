"""4p_Sparse_Attention: Llama-3.1-70B GQA under a fixed block-sparse causal pattern (local window, sink, strided)."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "llama3_70b_sparse_attention",
    "model": "Llama-3.1-70B",
    "operator": "sparse_attention",
    "batch": 4,
    "seq_len": 4096,
    "num_query_heads": 64,
    "num_kv_heads": 8,
    "head_dim": 128,
    # The pattern is set in blocks of seq_len // num_blocks tokens (128 at full size), so every size keeps it.
    "num_blocks": 32,
    "local_blocks": 3,  # a query block sees itself and the 2 blocks before it
    "global_blocks": 1,  # the first block is a sink every query sees
    "stride_blocks": 8,  # the last block of every group of 8 summarises it for all later queries
}
SIZES = {"smoke": {"batch": 1, "seq_len": 256, "num_query_heads": 8, "num_kv_heads": 2, "head_dim": 128}}

# q is drawn wider than k so the scaled logits spread over several units and softmax rows are peaked.
Q_SCALE = 2.0
# Query rows per step of workload's loop. All rows at once would make XLA hold the f32 scores of every head
# (batch * heads * seq^2 * 4 bytes: 16 GiB at full size, more than a v5e's HBM); a block of rows bounds them
# at batch * heads * Q_CHUNK * seq * 4 bytes. Each row's softmax still sees all its keys, so the result is the same.
Q_CHUNK = 256


def visible(q_idx, kv_idx, seq_len):
    """Whether query q_idx may attend to key kv_idx (broadcasting; works on numpy and jax arrays alike)."""
    block = seq_len // CONFIG["num_blocks"]
    qb, kb = q_idx // block, kv_idx // block
    pattern = ((qb - kb < CONFIG["local_blocks"]) | (kb < CONFIG["global_blocks"])
               | (kb % CONFIG["stride_blocks"] == CONFIG["stride_blocks"] - 1))
    return (q_idx >= kv_idx) & pattern

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
    """softmax(q k^T / sqrt(head_dim)) v over the keys `visible` allows, kv heads shared by groups of q heads."""
    batch, seq, num_q, head_dim = q.shape
    num_kv = k.shape[2]
    if seq % CONFIG["num_blocks"]:
        raise ValueError(f"seq_len {seq} is not a multiple of num_blocks {CONFIG['num_blocks']}")
    chunk = math.gcd(seq, Q_CHUNK)

    def rows(start):
        qg = jax.lax.dynamic_slice_in_dim(q, start, chunk, axis=1).reshape(
            batch, chunk, num_kv, num_q // num_kv, head_dim)
        s = jnp.einsum("bqhgd,bkhd->bhgqk", qg, k, preferred_element_type=jnp.float32) / math.sqrt(head_dim)
        q_idx = start + jnp.arange(chunk)
        s = jnp.where(visible(q_idx[:, None], jnp.arange(seq)[None, :], seq), s, -jnp.inf)
        p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        p = p / jnp.sum(p, axis=-1, keepdims=True)
        out = jnp.einsum("bhgqk,bkhd->bqhgd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return out.reshape(batch, chunk, num_q, head_dim).astype(q.dtype)

    out = jax.lax.map(rows, jnp.arange(0, seq, chunk))  # [seq // chunk, batch, chunk, num_q, head_dim]
    return out.transpose(1, 0, 2, 3, 4).reshape(batch, seq, num_q, head_dim)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    idx = np.arange(d["seq_len"])
    pairs = int(np.count_nonzero(visible(idx[:, None], idx[None, :], d["seq_len"])))
    return 4 * d["batch"] * d["num_query_heads"] * pairs * d["head_dim"]
