"""1p_Flash_Attention: causal multi-head self-attention (baseline MHA), q, k, v laid out [batch, heads, seq, head_dim]."""

import math

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "baseline_mha_flash_attention",
    "model": "Baseline-MHA",
    "operator": "flash_attention",
    "batch": 4,
    "seq_len": 4096,
    "num_heads": 64,
    "head_dim": 128,
    "causal": True,
}
SIZES = {"smoke": {"batch": 2, "seq_len": 256, "num_heads": 2, "head_dim": 128}}

# q is drawn wider than k so the scaled logits spread over several units and softmax rows are peaked.
Q_SCALE = 2.0
# Query rows per step of workload's loop. All rows at once would make XLA hold the f32 scores of every head
# (batch * heads * seq^2 * 4 bytes: 16 GiB at full size, more than a v5e's HBM); a block of rows bounds them
# at batch * heads * Q_CHUNK * seq * 4 bytes. Each row's softmax still sees all its keys, so the result is the same.
Q_CHUNK = 256

# Independent dimensions (sequences and heads attend independently): the TPU estimator may shrink these
# and extrapolate.
PARALLEL_DIMS = ("batch", "num_heads")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (q, k, v), each [batch, num_heads, seq_len, head_dim] (the layout of jax's TPU flash attention)."""
    d = dims(CONFIG, SIZES, size)
    shape = (d["batch"], d["num_heads"], d["seq_len"], d["head_dim"])
    kq, kk, kv = keys(seed, 3)
    q = draw(kq, shape, dtype, seed, scale=Q_SCALE)
    k = draw(kk, shape, dtype, seed)
    v = draw(kv, shape, dtype, seed)
    return q, k, v


def workload(q, k, v):
    """softmax(q k^T / sqrt(head_dim), causal) v: logits and softmax in f32, probabilities fed to the MXU in q's dtype."""
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    chunk = math.gcd(seq_q, Q_CHUNK)

    def rows(start):
        qi = jax.lax.dynamic_slice_in_dim(q, start, chunk, axis=2)  # [batch, heads, chunk, head_dim]
        s = jnp.einsum("bhqd,bhkd->bhqk", qi, k, preferred_element_type=jnp.float32) / math.sqrt(head_dim)
        if CONFIG["causal"]:
            # Query i sees keys 0..i; with seq_q == seq_k the diagonal keeps every row non-empty.
            mask = (start + jnp.arange(chunk))[:, None] >= jnp.arange(seq_k)[None, :]
            s = jnp.where(mask, s, -jnp.inf)
        p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        p = p / jnp.sum(p, axis=-1, keepdims=True)
        out = jnp.einsum("bhqk,bhkd->bhqd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return out.astype(q.dtype)

    out = jax.lax.map(rows, jnp.arange(0, seq_q, chunk))  # [seq_q // chunk, batch, heads, chunk, head_dim]
    return out.transpose(1, 2, 0, 3, 4).reshape(batch, heads, seq_q, head_dim)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    dense = 4 * d["batch"] * d["num_heads"] * d["seq_len"] * d["seq_len"] * d["head_dim"]
    # The causal mask leaves about half of the two matmuls useful.
    return dense // 2 if CONFIG["causal"] else dense
