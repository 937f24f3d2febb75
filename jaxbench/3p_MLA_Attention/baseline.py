"""3p_MLA_Attention: DeepSeek-V3 multi-head latent attention (low-rank q, compressed kv, decoupled RoPE), causal."""

import math

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "deepseek_v3_mla_attention",
    "model": "DeepSeek-V3-671B",
    "operator": "mla_attention",
    "batch": 4,
    "seq_len": 2048,
    "emb_dim": 7168,
    "num_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "rope_theta": 10000,
    "rms_eps": 1e-6,
}
SIZES = {"smoke": {"batch": 1, "seq_len": 128, "emb_dim": 256, "num_heads": 4, "q_lora_rank": 128,
                   "kv_lora_rank": 128}}

# The up-projected q is drawn wider so the logits spread over several units and softmax rows are peaked.
Q_SCALE = 2.0

# Query rows per step of workload's attention loop. All rows at once would make XLA hold the f32 scores of every
# head (batch * heads * seq^2 * 4 bytes: 8 GiB at full size, and with the projections more than the 15.25 GiB a
# v4 compile-only device has); a block of rows bounds them at batch * heads * Q_CHUNK * seq * 4 bytes. Each row's
# softmax still sees all its keys, so the result is the same.
Q_CHUNK = 256

# Independent dimensions (sequences and heads attend independently): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("batch", "num_heads")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x, w_dq, q_norm, w_uq, w_dkv, kv_norm, w_ukv, w_o), weights laid out input-axis first (MaxText).

    x[batch, seq, emb]; w_dq[emb, q_lora]; q_norm[q_lora]; w_uq[q_lora, heads, nope+rope];
    w_dkv[emb, kv_lora+rope] (the latent, then one rope key shared by all heads); kv_norm[kv_lora];
    w_ukv[kv_lora, heads, nope+v]; w_o[heads, v, emb]. The norm scales are drawn near 1.
    """
    d = dims(CONFIG, SIZES, size)
    h, nope, rope, vd = d["num_heads"], d["qk_nope_head_dim"], d["qk_rope_head_dim"], d["v_head_dim"]
    emb, qr, kr = d["emb_dim"], d["q_lora_rank"], d["kv_lora_rank"]
    k = keys(seed, 8)
    x = draw(k[0], (d["batch"], d["seq_len"], emb), dtype, seed)
    w_dq = weight(k[1], (emb, qr), dtype, seed)
    q_norm = draw(k[2], (qr,), dtype, seed, scale=0.5, shift=1.0)
    w_uq = draw(k[3], (qr, h, nope + rope), dtype, seed, scale=Q_SCALE / math.sqrt(qr))
    w_dkv = weight(k[4], (emb, kr + rope), dtype, seed)
    kv_norm = draw(k[5], (kr,), dtype, seed, scale=0.5, shift=1.0)
    w_ukv = weight(k[6], (kr, h, nope + vd), dtype, seed)
    w_o = weight(k[7], (h, vd, emb), dtype, seed, fan_in=h * vd)
    return x, w_dq, q_norm, w_uq, w_dkv, kv_norm, w_ukv, w_o


def _rms_norm(x, scale):
    xf = x.astype(jnp.float32)
    normed = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + CONFIG["rms_eps"])
    return (normed * scale.astype(jnp.float32)).astype(x.dtype)


def _rope(x, seq_axis):
    """Rotate-half RoPE over the last axis, position = index along `seq_axis`, computed in f32."""
    seq, dim = x.shape[seq_axis], x.shape[-1]
    inv_freq = CONFIG["rope_theta"] ** (-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
    ang = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    shape = [1] * x.ndim
    shape[seq_axis], shape[-1] = seq, dim
    cos = jnp.concatenate([jnp.cos(ang)] * 2, axis=-1).reshape(shape)
    sin = jnp.concatenate([jnp.sin(ang)] * 2, axis=-1).reshape(shape)
    xf = x.astype(jnp.float32)
    rotated = jnp.concatenate([-xf[..., dim // 2:], xf[..., : dim // 2]], axis=-1)
    return (xf * cos + rotated * sin).astype(x.dtype)


def workload(x, w_dq, q_norm, w_uq, w_dkv, kv_norm, w_ukv, w_o):
    """MLA forward: q = up(norm(down(x))); k, v up-projected from the normed kv latent; causal; output projected."""
    f32 = jnp.float32
    seq, kv_lora = x.shape[1], kv_norm.shape[0]
    rope = w_dkv.shape[1] - kv_lora
    nope = w_uq.shape[2] - rope
    c_q = _rms_norm(jnp.matmul(x, w_dq, preferred_element_type=f32).astype(x.dtype), q_norm)
    q = jnp.einsum("bsr,rhd->bshd", c_q, w_uq, preferred_element_type=f32).astype(x.dtype)
    q = jnp.concatenate([q[..., :nope], _rope(q[..., nope:], seq_axis=1)], axis=-1)
    kv_a = jnp.matmul(x, w_dkv, preferred_element_type=f32).astype(x.dtype)
    c_kv = _rms_norm(kv_a[..., :kv_lora], kv_norm)
    k_pe = _rope(kv_a[..., kv_lora:], seq_axis=1)  # [batch, seq, rope], one rope key for every head
    kv = jnp.einsum("bsr,rhd->bshd", c_kv, w_ukv, preferred_element_type=f32).astype(x.dtype)
    k_nope, v = kv[..., :nope], kv[..., nope:]
    batch, heads, v_dim = x.shape[0], v.shape[2], v.shape[3]
    chunk = math.gcd(seq, Q_CHUNK)

    def rows(start):
        qi = lax.dynamic_slice_in_dim(q, start, chunk, axis=1)  # [batch, chunk, heads, nope + rope]
        # q.k splits into the per-head nope part and the shared rope part; the scale covers both.
        s = (jnp.einsum("bqhd,bkhd->bhqk", qi[..., :nope], k_nope, preferred_element_type=f32)
             + jnp.einsum("bqhd,bkd->bhqk", qi[..., nope:], k_pe, preferred_element_type=f32)) / math.sqrt(nope + rope)
        causal = (start + jnp.arange(chunk))[:, None] >= jnp.arange(seq)[None, :]
        s = jnp.where(causal, s, -jnp.inf)
        p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        p = p / jnp.sum(p, axis=-1, keepdims=True)
        return jnp.einsum("bhqk,bkhd->bqhd", p.astype(v.dtype), v, preferred_element_type=f32).astype(x.dtype)

    o = lax.map(rows, jnp.arange(0, seq, chunk))  # [seq // chunk, batch, chunk, heads, v_head_dim]
    o = o.transpose(1, 0, 2, 3, 4).reshape(batch, seq, heads, v_dim)
    return jnp.einsum("bqhd,hde->bqe", o, w_o, preferred_element_type=f32).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    h, nope, rope, vd = d["num_heads"], d["qk_nope_head_dim"], d["qk_rope_head_dim"], d["v_head_dim"]
    emb, qr, kr = d["emb_dim"], d["q_lora_rank"], d["kv_lora_rank"]
    tokens = d["batch"] * d["seq_len"]
    proj = 2 * tokens * (emb * qr + qr * h * (nope + rope) + emb * (kr + rope) + kr * h * (nope + vd) + h * vd * emb)
    pairs = d["batch"] * d["seq_len"] * (d["seq_len"] + 1) // 2  # causal (query, key) pairs
    return proj + 2 * pairs * h * (nope + rope + vd)
