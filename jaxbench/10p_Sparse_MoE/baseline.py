"""10p_Sparse_MoE: the Mixtral-8x7B sparse MoE block, top-2 routing over 8 SwiGLU experts."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "mixtral_8x7b_sparse_moe",
    "model": "Mixtral-8x7B",
    "operator": "sparse_moe",
    "batch": 2,
    "seq_len": 4096,
    "emb_dim": 4096,
    "mlp_dim": 14336,
    "num_experts": 8,
    "num_experts_per_tok": 2,
}
SIZES = {"smoke": {"batch": 2, "seq_len": 32, "emb_dim": 128, "mlp_dim": 256}}

# Independent dimensions (tokens are routed and computed independently): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("batch", "seq_len")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[batch, seq_len, emb_dim], router[emb_dim, num_experts], w1[num_experts, emb_dim, mlp_dim],
    w3[num_experts, emb_dim, mlp_dim], w2[num_experts, mlp_dim, emb_dim]); w1 is the gate, w3 the up projection."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3, k4, k5 = keys(seed, 5)
    e, m, n = d["emb_dim"], d["mlp_dim"], d["num_experts"]
    x = draw(k1, (d["batch"], d["seq_len"], e), dtype, seed)
    # Router logits of unit spread make the two chosen weights unequal, so the weighting matters.
    router = weight(k2, (e, n), dtype, seed)
    w1 = weight(k3, (n, e, m), dtype, seed, fan_in=e)
    w3 = weight(k4, (n, e, m), dtype, seed, fan_in=e)
    w2 = weight(k5, (n, m, e), dtype, seed, fan_in=m)
    return x, router, w1, w3, w2


def workload(x, router, w1, w3, w2):
    """Routes each token to its top-k experts (softmax over the chosen logits), runs only those token-expert
    pairs through grouped matmuls after sorting them by expert, and sums the weighted expert outputs."""
    k = CONFIG["num_experts_per_tok"]
    b, s, e = x.shape
    n = router.shape[1]
    tokens = x.reshape(b * s, e)
    # Routing in f32 so that near-tied experts are chosen the same way at every precision.
    logits = jnp.matmul(tokens, router, preferred_element_type=jnp.float32)
    top_logits, top_experts = lax.top_k(logits, k)
    gates = jax.nn.softmax(top_logits, axis=-1)

    flat_experts = top_experts.reshape(-1)
    order = jnp.argsort(flat_experts, stable=True)
    group_sizes = jnp.bincount(flat_experts, length=n).astype(jnp.int32)
    sorted_tokens = tokens[order // k]
    gate = lax.ragged_dot(sorted_tokens, w1, group_sizes, preferred_element_type=jnp.float32)
    up = lax.ragged_dot(sorted_tokens, w3, group_sizes, preferred_element_type=jnp.float32)
    hidden = (jax.nn.silu(gate) * up).astype(x.dtype)
    expert_out = lax.ragged_dot(hidden, w2, group_sizes, preferred_element_type=jnp.float32)

    unsorted = expert_out[jnp.argsort(order)].reshape(b * s, k, e)
    out = jnp.einsum("tke,tk->te", unsorted, gates)
    return out.reshape(b, s, e).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    tokens = d["batch"] * d["seq_len"]
    routed = tokens * d["num_experts_per_tok"]
    return (2 * tokens * d["emb_dim"] * d["num_experts"] + 6 * routed * d["emb_dim"] * d["mlp_dim"]
            + 5 * routed * d["mlp_dim"] + 2 * routed * d["emb_dim"])
