"""rw_lightning_indexer: the DeepSeek-V3.2 sparse-attention (DSA) lightning indexer, causal ReLU index scores summed
over weighted index heads, then each query's top-k keys; shapes from deepseek-ai/DeepSeek-V3.2-Exp's config.json
(index_n_heads 64, index_head_dim 128, index_topk 2048)."""

import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "deepseek_v32_lightning_indexer",
    "model": "DeepSeek-V3.2-Exp",
    "operator": "lightning_indexer_topk",
    "batch": 1,
    "seq_q": 16384,  # query rows; they are the last seq_q positions of the seq_k keys
    "seq_k": 16384,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "index_topk": 2048,
}
# index_topk is not visible in any input's shape, so it stays 2048 at every size (like the model's other constants);
# the smoke prefill is the last 256 rows of a 2176-token prompt, so its first 127 rows see fewer than 2048 keys
# (zero-filled slots) and the rest select 2048 of up to 2176.
SIZES = {
    "smoke": {"batch": 1, "seq_q": 256, "seq_k": 2176, "index_n_heads": 8, "index_head_dim": 128},
    "smoke@decode": {"batch": 4, "seq_k": 4096},
}
# prefill: a 16K-token prompt scored against itself (row t sees keys 0..t); decode: one new token per sequence
# scored against its whole cached indexer-key history.
CONFIGS = {"prefill": {}, "decode": {"batch": 32, "seq_q": 1, "seq_k": 65536}}

# Query rows per step of workload's loop. All rows at once would make XLA hold the f32 per-head logits
# (batch * seq_q * heads * seq_k * 4 bytes: 64 GiB at full prefill size); a block of rows bounds them at
# batch * Q_CHUNK * heads * seq_k * 4 bytes (512 MiB). Each row's scores and top-k are its own, so the result is
# the same.
Q_CHUNK = 128

# Independent dimensions (every query row of every sequence scores and selects on its own; the heads are summed,
# so they are not independent): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("batch", "seq_q")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (q[batch, seq_q, index_n_heads, index_head_dim], k[batch, seq_k, index_head_dim],
    w[batch, seq_q, index_n_heads] float32).

    q and k are the indexer's query heads and its single shared key after RoPE and the Hadamard rotation (the model
    quantises both to FP8; here they stay in `dtype`). w is the per-token head weighting the model computes in f32
    (weights_proj(x)), drawn unit-variance and mixed-sign; the n_heads^-0.5 and head_dim^-0.5 factors are applied in
    workload.
    """
    d = dims(CONFIG, SIZES, size, CONFIGS)
    if d["seq_q"] > d["seq_k"]:
        raise ValueError(f"seq_q {d['seq_q']} > seq_k {d['seq_k']}: query rows are the last seq_q key positions")
    kq, kk, kw = keys(seed, 3)
    b, h, hd = d["batch"], d["index_n_heads"], d["index_head_dim"]
    q = draw(kq, (b, d["seq_q"], h, hd), dtype, seed)
    k = draw(kk, (b, d["seq_k"], hd), dtype, seed)
    w = draw(kw, (b, d["seq_q"], h), jnp.float32, seed)
    return q, k, w


def workload(q, k, w):
    """Index scores I[t, s] = sum_h w[t, h] * relu(q[t, h] . k[s]) * (n_heads * head_dim)^-0.5 for keys s <= t,
    then each row's index_topk largest, sorted descending, in f32 [batch, seq_q, index_topk].

    The model hands the top-k *indices* to the sparse attention; they are not unique under ties, so the selected
    scores are returned instead (a kernel that selects the right keys reproduces them exactly). A row with fewer
    than index_topk visible keys (prefill rows t < index_topk - 1) returns its t + 1 scores sorted descending
    followed by zeros in the slots the model fills with masked (-inf) entries.
    """
    batch, seq_q, heads, head_dim = q.shape
    seq_k = k.shape[1]
    topk = min(CONFIG["index_topk"], seq_k)  # the model selects min(index_topk, end_pos)
    scale = 1.0 / math.sqrt(heads * head_dim)
    chunk = math.gcd(seq_q, Q_CHUNK)
    wf = w.astype(jnp.float32)

    def rows(start):
        qi = lax.dynamic_slice_in_dim(q, start, chunk, axis=1)  # [batch, chunk, heads, head_dim]
        wi = lax.dynamic_slice_in_dim(wf, start, chunk, axis=1)  # [batch, chunk, heads]
        logits = jnp.einsum("bqhd,bkd->bqhk", qi, k, preferred_element_type=jnp.float32)
        # The head sum is elementwise f32 (not a dot the MXU would take in bf16 passes at default precision).
        scores = jnp.sum(jax.nn.relu(logits) * wi[..., None], axis=2) * scale
        pos = seq_k - seq_q + start + jnp.arange(chunk)  # absolute positions of this block's query rows
        visible = jnp.arange(seq_k)[None, :] <= pos[:, None]
        scores = jnp.where(visible[None], scores, -jnp.inf)
        top = lax.top_k(scores, topk)[0]  # [batch, chunk, topk], descending, -inf in the slots past t + 1
        return jnp.where(jnp.isfinite(top), top, 0.0)

    out = lax.map(rows, jnp.arange(0, seq_q, chunk))  # [seq_q // chunk, batch, chunk, topk]
    return out.transpose(1, 0, 2, 3).reshape(batch, seq_q, topk)


def get_flops(size="full"):
    """The q.k dot and the weighted head sum over the visible (query, key) pairs; the top-k is not counted."""
    d = dims(CONFIG, SIZES, size, CONFIGS)
    sq, sk = d["seq_q"], d["seq_k"]
    pairs = d["batch"] * (sq * (sk - sq) + sq * (sq + 1) // 2)  # row i sees sk - sq + i + 1 keys
    return pairs * d["index_n_heads"] * (2 * d["index_head_dim"] + 2)
