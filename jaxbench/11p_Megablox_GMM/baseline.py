"""11p_Megablox_GMM: the Qwen3-235B-A22B MoE up-projection as a grouped matmul over expert-sorted tokens."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "qwen3_235b_megablox_gmm",
    "model": "Qwen3-235B-A22B",
    "operator": "grouped_matmul",
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "emb_dim": 4096,
    "moe_mlp_dim": 1536,
    "seq_len": 4096,
}
SIZES = {"smoke": {"num_experts": 16, "num_experts_per_tok": 4, "emb_dim": 256, "moe_mlp_dim": 128, "seq_len": 64}}


def _group_sizes(key, rows, groups):
    """Ragged expert loads summing to `rows`: skewed popularity, with a sixteenth of the experts (at least
    one) receiving no tokens, as happens under load imbalance."""
    k_pop, k_empty, k_pick = jax.random.split(key, 3)
    popularity = jax.random.normal(k_pop, (groups,))
    empty = jax.random.permutation(k_empty, groups)[: max(1, groups // 16)]
    popularity = popularity.at[empty].set(-jnp.inf)
    picks = jax.random.categorical(k_pick, popularity, shape=(rows,))
    return jnp.bincount(picks, length=groups).astype(jnp.int32)

# Independent dimensions (tokens are routed and computed independently): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("seq_len",)


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (lhs[m, emb_dim], rhs[num_experts, emb_dim, moe_mlp_dim], group_sizes[num_experts] int32), where
    m = seq_len * num_experts_per_tok token-expert rows sorted by expert and group_sizes sums to m."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3 = keys(seed, 3)
    m = d["seq_len"] * d["num_experts_per_tok"]
    lhs = draw(k1, (m, d["emb_dim"]), dtype, seed)
    rhs = weight(k2, (d["num_experts"], d["emb_dim"], d["moe_mlp_dim"]), dtype, seed, fan_in=d["emb_dim"])
    return lhs, rhs, _group_sizes(k3, m, d["num_experts"])


def workload(lhs, rhs, group_sizes):
    """Rows of group g of lhs times rhs[g], f32 accumulation, in the inputs' dtype; every size is static."""
    return lax.ragged_dot(lhs, rhs, group_sizes, preferred_element_type=jnp.float32).astype(lhs.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    return 2 * d["seq_len"] * d["num_experts_per_tok"] * d["emb_dim"] * d["moe_mlp_dim"]
