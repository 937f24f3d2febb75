"""rw_paged_mla_decode: DeepSeek-V3 multi-head latent attention decode in absorbed (FlashMLA) form over a paged latent
KV cache; shapes from deepseek-ai/DeepSeek-V3's config.json (num_attention_heads 128, kv_lora_rank 512,
qk_rope_head_dim 64, qk_nope_head_dim 128, rope_scaling yarn factor 40, mscale 1.0)."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "deepseek_v3_paged_mla_decode",
    "model": "DeepSeek-V3-671B",
    "operator": "paged_mla_decode",
    "batch": 64,
    "seq_q": 1,  # new tokens per sequence: 1, or 2 with the multi-token-prediction draft
    "num_heads": 128,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,  # absorbed into the latent; sets the softmax scale only
    "page_size": 64,  # FlashMLA's block size
    "pages_per_seq": 128,  # max context page_size * pages_per_seq = 8192 tokens
    "rope_factor": 40,  # rope_scaling: YaRN factor and mscale (mscale_all_dim is 1.0 too)
    "rope_mscale": 1.0,
}
SIZES = {
    "smoke": {"batch": 4, "num_heads": 16, "page_size": 64, "pages_per_seq": 4},
    "smoke@long": {"batch": 2, "pages_per_seq": 16},
}
# decode: 64 sequences of up to 8K tokens; mtp: the same with a second (speculative) token per sequence, causal
# between the two; long: 8 sequences of up to 128K tokens.
CONFIGS = {"decode": {}, "mtp": {"seq_q": 2}, "long": {"batch": 8, "pages_per_seq": 2048}}

# Logits are drawn to spread over about Q_SCALE units (q scaled by 1 / (softmax_scale * sqrt(576))), so softmax rows
# are peaked but not one-hot.
Q_SCALE = 2.0

# Independent dimensions (each sequence reads its own pages; every head attends on its own to the latent all heads
# share, which is read either way): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("batch", "num_heads")


def softmax_scale():
    """(qk_nope_head_dim + qk_rope_head_dim)^-0.5 times YaRN's mscale^2, mscale = 0.1 * mscale * ln(factor) + 1, as
    DeepSeek-V3 applies it when serving past its original 4K context (about 0.1352)."""
    mscale = 0.1 * CONFIG["rope_mscale"] * math.log(CONFIG["rope_factor"]) + 1.0
    return (CONFIG["qk_nope_head_dim"] + CONFIG["qk_rope_head_dim"]) ** -0.5 * mscale * mscale


def sequence_lengths(key, batch, seq_q, max_len):
    """Ragged cached lengths (the new tokens included) in [seq_q, max_len], one per sequence."""
    return jax.random.randint(key, (batch,), seq_q, max_len + 1, dtype=jnp.int32)


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (q, kv_pages, lengths, page_table), FlashMLA's decode layout.

    q[batch, seq_q, num_heads, kv_lora_rank + qk_rope_head_dim]: each head's no-RoPE query absorbed through W_UK into
    the latent space, then its RoPE part. kv_pages[num_pages, page_size, kv_lora_rank + qk_rope_head_dim]: per token
    the compressed latent c_kv (the key's no-RoPE part and, through W_UV, the value) then the RoPE key shared by all
    heads; num_pages = batch * pages_per_seq. lengths[batch] int32; page_table[batch, pages_per_seq] int32, a random
    permutation of the page pool, so a sequence's pages are scattered; entries past a length point at pages holding
    data that must be masked out.
    """
    d = dims(CONFIG, SIZES, size, CONFIGS)
    b, pps, width = d["batch"], d["pages_per_seq"], d["kv_lora_rank"] + d["qk_rope_head_dim"]
    kq, kc, kl, kp = keys(seed, 4)
    q = draw(kq, (b, d["seq_q"], d["num_heads"], width), dtype, seed,
             scale=Q_SCALE / (softmax_scale() * math.sqrt(width)))
    kv_pages = draw(kc, (b * pps, d["page_size"], width), dtype, seed)
    lengths = sequence_lengths(kl, b, d["seq_q"], pps * d["page_size"])
    page_table = jax.random.permutation(kp, b * pps).astype(jnp.int32).reshape(b, pps)
    return q, kv_pages, lengths, page_table


def workload(q, kv_pages, lengths, page_table):
    """Per sequence and head: softmax(softmax_scale * q . [c_kv, k_rope]) over the cached tokens each new token may
    see, times c_kv: the latent output [batch, seq_q, num_heads, kv_lora_rank] (W_UV and the output projection
    follow outside the kernel). New token i of a sequence of length L sits at position L - seq_q + i and sees
    tokens 0 .. L - seq_q + i."""
    batch, seq_q, heads, width = q.shape
    page_size = kv_pages.shape[1]
    rank = width - CONFIG["qk_rope_head_dim"]
    max_len = page_table.shape[1] * page_size
    kv = kv_pages[page_table].reshape(batch, max_len, width)  # each sequence's pages in order
    s = jnp.einsum("bqhd,bkd->bqhk", q, kv, preferred_element_type=jnp.float32) * softmax_scale()
    last = lengths[:, None] - seq_q + jnp.arange(seq_q)[None, :]  # [batch, seq_q]: the last position each row sees
    visible = jnp.arange(max_len)[None, None, :] <= last[:, :, None]  # lengths >= seq_q keeps every row non-empty
    s = jnp.where(visible[:, :, None, :], s, -jnp.inf)
    p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    p = p / jnp.sum(p, axis=-1, keepdims=True)
    out = jnp.einsum("bqhk,bkc->bqhc", p.astype(kv.dtype), kv[..., :rank], preferred_element_type=jnp.float32)
    return out.astype(q.dtype)


def get_flops(size="full"):
    """FLOPs over the cached tokens actually attended, for the default seed's lengths."""
    d = dims(CONFIG, SIZES, size, CONFIGS)
    sq, max_len = d["seq_q"], d["pages_per_seq"] * d["page_size"]
    lengths = np.asarray(sequence_lengths(keys(42, 4)[2], d["batch"], sq, max_len)).astype(np.int64)
    pairs = int(np.sum(sq * (lengths - sq) + sq * (sq + 1) // 2))  # row i sees L - seq_q + i + 1 tokens
    return 2 * pairs * d["num_heads"] * (d["kv_lora_rank"] + d["qk_rope_head_dim"] + d["kv_lora_rank"])
