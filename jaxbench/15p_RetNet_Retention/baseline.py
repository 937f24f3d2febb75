"""15p_RetNet_Retention: RetNet-6.7B parallel retention with per-head decay, followed by the per-head norm."""

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "retnet_6_7b_retention",
    "model": "RetNet-6.7B",
    "operator": "retention",
    "batch": 4,
    "seq_len": 4096,
    "num_heads": 16,
    "head_dim": 256,
    "d_model": 4096,
    "epsilon": 1e-6,
}
SIZES = {"smoke": {"batch": 2, "seq_len": 128, "num_heads": 4, "head_dim": 128, "d_model": 512}}

# Independent dimensions (sequences and heads are independent): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("batch", "num_heads")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (q, k, v), each [batch, num_heads, seq_len, head_dim]."""
    d = dims(CONFIG, SIZES, size)
    shape = (d["batch"], d["num_heads"], d["seq_len"], d["head_dim"])
    return tuple(draw(k, shape, dtype, seed) for k in keys(seed, 3))


def decay_log(num_heads):
    """log(gamma) per head, gamma = 1 - 2^(-5 - h): head 0 forgets within ~32 steps, the last barely at all."""
    return jnp.log1p(-jnp.exp2(-5.0 - jnp.arange(num_heads, dtype=jnp.float32)))


def workload(q, k, v):
    """((q k^T / sqrt(d)) * D) v with D[n, m] = gamma^(n - m) for n >= m, else 0, then each head's output row
    normalised over head_dim (RetNet's group norm, no affine). Scores and decay in f32, rounded to the input dtype
    for the value matmul."""
    _, h, s, dh = q.shape
    scores = jnp.einsum("bhnd,bhmd->bhnm", q, k, preferred_element_type=jnp.float32) * dh ** -0.5
    n = jnp.arange(s)[:, None]
    m = jnp.arange(s)[None, :]
    # exp of -inf above the diagonal gives exact zeros without ever forming gamma^(negative).
    log_decay = decay_log(h)[:, None, None] * (n - m).astype(jnp.float32)
    decay = jnp.exp(jnp.where(n >= m, log_decay, -jnp.inf))
    out = jnp.einsum("bhnm,bhmd->bhnd", (scores * decay).astype(q.dtype), v, preferred_element_type=jnp.float32)
    centred = out - jnp.mean(out, axis=-1, keepdims=True)
    var = jnp.mean(lax.square(centred), axis=-1, keepdims=True)
    return (centred * lax.rsqrt(var + CONFIG["epsilon"])).astype(q.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    pairs = d["seq_len"] * (d["seq_len"] + 1) // 2  # causal: only n >= m contributes
    rows = d["batch"] * d["num_heads"]
    return rows * pairs * (4 * d["head_dim"] + 2) + 5 * rows * d["seq_len"] * d["head_dim"]
