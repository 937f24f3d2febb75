"""12p_RMSNorm: Llama-3.1-70B pre-attention RMS normalisation over the embedding dimension."""

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "llama3_70b_rmsnorm",
    "model": "Llama-3.1-70B",
    "operator": "rms_norm",
    "batch": 8,
    "seq_len": 4096,
    "emb_dim": 8192,
    "epsilon": 1e-5,
}
SIZES = {"smoke": {"batch": 2, "seq_len": 64, "emb_dim": 256}}

# Independent dimensions (rows are normalised independently): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("batch", "seq_len")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[batch, seq_len, emb_dim], scale[emb_dim]); scale is 1 plus mixed-sign noise."""
    d = dims(CONFIG, SIZES, size)
    k1, k2 = keys(seed, 2)
    x = draw(k1, (d["batch"], d["seq_len"], d["emb_dim"]), dtype, seed)
    scale = draw(k2, (d["emb_dim"],), dtype, seed, scale=0.5, shift=1.0)
    return x, scale


def workload(x, scale):
    """x * rsqrt(mean(x^2) + eps) * scale, normalised in f32, scaled in the input dtype."""
    xf = x.astype(jnp.float32)
    ms = jnp.mean(lax.square(xf), axis=-1, keepdims=True)
    normed = (xf * lax.rsqrt(ms + CONFIG["epsilon"])).astype(x.dtype)
    return normed * scale


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    return 5 * d["batch"] * d["seq_len"] * d["emb_dim"]
