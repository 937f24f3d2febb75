"""9p_SwiGLU_MLP: the Llama-3.1-70B feed-forward block, (silu(x @ w_gate) * (x @ w_up)) @ w_down."""

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "llama3_70b_swiglu_mlp",
    "model": "Llama-3.1-70B",
    "operator": "swiglu_mlp",
    "batch": 2,
    "seq_len": 4096,
    "emb_dim": 8192,
    "mlp_dim": 28672,
}
SIZES = {"smoke": {"batch": 2, "seq_len": 64, "emb_dim": 128, "mlp_dim": 384}}

# Independent dimensions (tokens pass through the MLP independently): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("batch", "seq_len")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[batch, seq_len, emb_dim], w_gate[emb_dim, mlp_dim], w_up[emb_dim, mlp_dim], w_down[mlp_dim, emb_dim])."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3, k4 = keys(seed, 4)
    e, m = d["emb_dim"], d["mlp_dim"]
    x = draw(k1, (d["batch"], d["seq_len"], e), dtype, seed)
    w_gate = weight(k2, (e, m), dtype, seed)
    w_up = weight(k3, (e, m), dtype, seed)
    w_down = weight(k4, (m, e), dtype, seed)
    return x, w_gate, w_up, w_down


def workload(x, w_gate, w_up, w_down):
    """Gate and up projections accumulate in f32; the activated product is rounded to the input dtype
    before the down projection, as the model's bf16 activations are."""
    gate = jnp.matmul(x, w_gate, preferred_element_type=jnp.float32)
    up = jnp.matmul(x, w_up, preferred_element_type=jnp.float32)
    hidden = (jax.nn.silu(gate) * up).astype(x.dtype)
    return jnp.matmul(hidden, w_down, preferred_element_type=jnp.float32).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    tokens = d["batch"] * d["seq_len"]
    return 6 * tokens * d["emb_dim"] * d["mlp_dim"] + 5 * tokens * d["mlp_dim"]
