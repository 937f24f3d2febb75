"""rw_topk_sparse_attention_sink: GQA over only each query's top-k selected keys (DSA-style, indices given) with
gpt-oss's learned per-head attention sink in the softmax denominator; heads from openai/gpt-oss-120b's config.json
(num_attention_heads 64, num_key_value_heads 8, head_dim 64), top-k from deepseek-ai/DeepSeek-V3.2-Exp's
(index_topk 2048)."""

import math
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "gpt_oss_120b_topk_sparse_attention_sink",
    "model": "gpt-oss-120b",
    "operator": "topk_sparse_attention_sink",
    "batch": 1,
    "seq_q": 8192,  # query rows: the last seq_q of the seq_k positions (a chunk prefilled after a cached prefix)
    "seq_k": 16384,
    "num_query_heads": 64,
    "num_kv_heads": 8,
    "head_dim": 64,
    "topk": 2048,  # DeepSeek-V3.2-Exp's index_topk: keys each query attends to
}
SIZES = {
    "smoke": {"batch": 1, "seq_q": 128, "seq_k": 384, "num_query_heads": 16, "num_kv_heads": 2, "head_dim": 64,
              "topk": 256},
    "smoke@decode": {"batch": 4, "seq_k": 1024},
}
# prefill: the second 8K half of a 16K prompt, its first half already cached; decode: one new token per sequence
# over a 64K-token cache. Every query sees at least topk keys, so every selection holds topk distinct valid keys.
CONFIGS = {"prefill": {}, "decode": {"batch": 32, "seq_q": 1, "seq_k": 65536}}

# q is drawn wider than k so the scaled logits spread over several units and softmax rows are peaked.
Q_SCALE = 2.0
# Query rows per step of workload's loop. Gathering every row's selected keys at once would take
# batch * seq_q * topk * num_kv_heads * head_dim * 2 bytes for k and again for v (8 GiB each at full size); a block
# of rows bounds them at batch * Q_CHUNK * topk * num_kv_heads * head_dim * 2 bytes (256 MiB). Rows are independent.
Q_CHUNK = 128

# Independent dimensions (every query row and every query head attends on its own; the kv heads they share are read
# either way): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("batch", "seq_q", "num_query_heads")


@partial(jax.jit, static_argnums=(1, 2, 3, 4))  # one compile instead of many eager ops
def select_keys(key, batch, seq_q, seq_k, topk):
    """indices[batch, seq_q, topk] int32: for query row i (position seq_k - seq_q + i), topk distinct keys drawn
    uniformly from the positions it may see (0 .. its own), in no particular order."""
    pos = seq_k - seq_q + jnp.arange(seq_q)
    visible = jnp.arange(seq_k)[None, :] <= pos[:, None]
    noise = jax.random.uniform(key, (batch, seq_q, seq_k))
    return lax.top_k(jnp.where(visible[None], noise, -1.0), topk)[1].astype(jnp.int32)


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (q[batch, seq_q, num_query_heads, head_dim], k and v [batch, seq_k, num_kv_heads, head_dim],
    sinks[num_query_heads], indices[batch, seq_q, topk] int32).

    The sink logits are drawn around log(topk) + Q_SCALE^2 / 2, about the log-sum-exp of a row's topk logits, with
    unit spread, so the sink takes a share of each head's softmax (mostly between about a tenth and nine tenths) that
    varies from head to head (gpt-oss learns one per head).
    """
    d = dims(CONFIG, SIZES, size, CONFIGS)
    b, sq, sk, kk = d["batch"], d["seq_q"], d["seq_k"], d["topk"]
    if sk - sq + 1 < kk:
        raise ValueError(f"the first query row sees {sk - sq + 1} keys, fewer than topk {kk}")
    k_q, k_k, k_v, k_s, k_i = keys(seed, 5)
    q = draw(k_q, (b, sq, d["num_query_heads"], d["head_dim"]), dtype, seed, scale=Q_SCALE)
    kv_shape = (b, sk, d["num_kv_heads"], d["head_dim"])
    k = draw(k_k, kv_shape, dtype, seed)
    v = draw(k_v, kv_shape, dtype, seed)
    sinks = draw(k_s, (d["num_query_heads"],), dtype, seed, scale=1.0, shift=math.log(kk) + Q_SCALE ** 2 / 2)
    return q, k, v, sinks, select_keys(k_i, b, sq, sk, kk)


def workload(q, k, v, sinks, indices):
    """Per query row and head: softmax over [q.k_j / sqrt(head_dim) for the row's topk keys j] plus the head's sink
    logit, the sink's share dropped, times v_j; logits and softmax in f32, probabilities fed to the MXU in v's dtype."""
    batch, seq_q, num_q, head_dim = q.shape
    num_kv = k.shape[2]
    group = num_q // num_kv
    chunk = math.gcd(seq_q, Q_CHUNK)
    # Query head h uses kv head h // group (the gpt-oss / Llama grouping) and sink h.
    sink = sinks.astype(jnp.float32).reshape(1, num_kv, group, 1, 1)
    gather = jax.vmap(lambda x, idx: x[idx])  # per sequence: x[seq_k, ...], idx[chunk, topk] -> [chunk, topk, ...]

    def rows(start):
        qg = lax.dynamic_slice_in_dim(q, start, chunk, axis=1).reshape(batch, chunk, num_kv, group, head_dim)
        idx = lax.dynamic_slice_in_dim(indices, start, chunk, axis=1)  # [batch, chunk, topk]
        ks, vs = gather(k, idx), gather(v, idx)  # [batch, chunk, topk, num_kv, head_dim]
        s = jnp.einsum("bqhgd,bqkhd->bhgqk", qg, ks, preferred_element_type=jnp.float32) / math.sqrt(head_dim)
        m = jnp.maximum(jnp.max(s, axis=-1, keepdims=True), sink)
        p = jnp.exp(s - m)
        p = p / (jnp.sum(p, axis=-1, keepdims=True) + jnp.exp(sink - m))
        out = jnp.einsum("bhgqk,bqkhd->bqhgd", p.astype(v.dtype), vs, preferred_element_type=jnp.float32)
        return out.reshape(batch, chunk, num_q, head_dim).astype(q.dtype)

    out = lax.map(rows, jnp.arange(0, seq_q, chunk))  # [seq_q // chunk, batch, chunk, num_q, head_dim]
    return out.transpose(1, 0, 2, 3, 4).reshape(batch, seq_q, num_q, head_dim)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size, CONFIGS)
    return 4 * d["batch"] * d["seq_q"] * d["num_query_heads"] * d["topk"] * d["head_dim"]
