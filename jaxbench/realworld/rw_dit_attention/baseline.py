"""rw_dit_attention: the full (non-causal, unmasked) self-attention of a video diffusion transformer over every
token of a video; shapes from Wan-Video/Wan2.1's model configs (wan/configs/wan_t2v_14B.py and wan_t2v_1_3B.py:
num_heads, dim / num_heads = 128, vae_stride (4, 8, 8), patch_size (1, 2, 2)) at its 81-frame 720p and 480p sizes."""

import math

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys


def video_tokens(frames: int, height: int, width: int) -> int:
    """Tokens of a video in the DiT: the VAE keeps the first frame and packs each later 4 frames into one latent
    frame, 8x8 pixels into one latent pixel; the transformer patchifies latents 1 x 2 x 2."""
    return ((frames - 1) // 4 + 1) * (height // 8 // 2) * (width // 8 // 2)


CONFIG = {
    "name": "wan21_14b_dit_attention",
    "model": "Wan2.1-T2V-14B",
    "operator": "dit_full_attention",
    "batch": 1,  # Wan samples one video at a time (the guided and unguided passes run as separate calls)
    "num_heads": 40,  # dim 5120 / head_dim 128
    # 81 frames of 1280x720: 21 latent frames x 45 x 80 patches = 75600 tokens (not a multiple of 128).
    "seq_len": video_tokens(81, 720, 1280),
    "head_dim": 128,
}
SIZES = {
    # 21 frames of 192x128: 6 latent frames x 8 x 12 patches = 576 tokens, again not a multiple of 128.
    "smoke": {"batch": 1, "num_heads": 2, "seq_len": video_tokens(21, 128, 192)},
    # 21 frames of 160x96: 6 x 6 x 10 = 360 tokens.
    "smoke@wan1_3b_480p": {"num_heads": 2, "seq_len": video_tokens(21, 96, 160)},
}
CONFIGS = {
    "wan14b_720p": {},
    # Wan2.1-T2V-1.3B (dim 1536 = 12 heads x 128) at 81 frames of 832x480: 21 x 30 x 52 = 32760 tokens.
    "wan1_3b_480p": {"model": "Wan2.1-T2V-1.3B", "num_heads": 12, "seq_len": video_tokens(81, 480, 832)},
}

# q is drawn wider than k so the scaled logits have a spread of ~2.5 units: at 75600 keys each softmax row still
# puts most of its weight on a few hundred keys instead of averaging all of them (near-uniform rows would make
# every output ~0), and at the smoke length rows are peaked without being one-hot.
Q_SCALE = 2.5
# workload's loop takes the largest block of query rows that divides seq_len, is at most MAX_ROWS, and keeps the
# block's f32 scores (batch * heads * rows * seq_len * 4 bytes) within SCORE_BYTES: all rows at once would be
# 40 * 75600^2 * 4 bytes = 851 GiB at full size. Each row's softmax still sees all its keys, so the result is
# the same. Full sizes: 84 rows (900 steps) for 14B at 720p, 504 rows (65 steps) for 1.3B at 480p.
SCORE_BYTES = 1 << 30
MAX_ROWS = 512

# Independent dimensions (videos and heads attend independently): the TPU estimator may shrink these and
# extrapolate.
PARALLEL_DIMS = ("batch", "num_heads")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (q, k, v), each [batch, num_heads, seq_len, head_dim]."""
    d = dims(CONFIG, SIZES, size, CONFIGS)
    shape = (d["batch"], d["num_heads"], d["seq_len"], d["head_dim"])
    kq, kk, kv = keys(seed, 3)
    q = draw(kq, shape, dtype, seed, scale=Q_SCALE)
    k = draw(kk, shape, dtype, seed)
    v = draw(kv, shape, dtype, seed)
    return q, k, v


def _rows_per_step(batch: int, heads: int, seq_q: int, seq_k: int) -> int:
    cap = max(1, min(MAX_ROWS, SCORE_BYTES // (batch * heads * seq_k * 4)))
    return max(r for r in range(1, min(cap, seq_q) + 1) if seq_q % r == 0)


def workload(q, k, v):
    """softmax(q k^T / sqrt(head_dim)) v over all keys (no mask): logits and softmax in f32, probabilities fed to
    the second matmul in q's dtype, f32 accumulation, output in q's dtype."""
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    rows = _rows_per_step(batch, heads, seq_q, seq_k)

    def block(start):
        qi = jax.lax.dynamic_slice_in_dim(q, start, rows, axis=2)  # [batch, heads, rows, head_dim]
        s = jnp.einsum("bhqd,bhkd->bhqk", qi, k, preferred_element_type=jnp.float32) / math.sqrt(head_dim)
        p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        p = p / jnp.sum(p, axis=-1, keepdims=True)
        out = jnp.einsum("bhqk,bhkd->bhqd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return out.astype(q.dtype)

    out = jax.lax.map(block, jnp.arange(0, seq_q, rows))  # [seq_q // rows, batch, heads, rows, head_dim]
    return out.transpose(1, 2, 0, 3, 4).reshape(batch, heads, seq_q, head_dim)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size, CONFIGS)
    # q k^T and p v, each 2 * seq_len^2 * head_dim per head, with no mask to skip any of it.
    return 4 * d["batch"] * d["num_heads"] * d["seq_len"] * d["seq_len"] * d["head_dim"]
