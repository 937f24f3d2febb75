"""14p_Ragged_Dot: Mixtral-8x7B expert projections as lax.ragged_dot, lhs rows grouped by expert times rhs[group]."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "mixtral_8x7b_ragged_dot",
    "model": "Mixtral-8x7B",
    "operator": "ragged_dot",
    "num_groups": 8,
    "M": 8192,
    "K": 4096,
    "N": 14336,
}
SIZES = {"smoke": {"num_groups": 8, "M": 256, "K": 128, "N": 384}}


def _group_sizes(key, rows, groups):
    """Ragged group sizes summing to `rows`: one group empty, the others drawn with skewed popularity so some
    are small and some hold several times their share."""
    k_pop, k_empty, k_pick = jax.random.split(key, 3)
    popularity = jax.random.normal(k_pop, (groups,))
    popularity = popularity.at[jax.random.randint(k_empty, (), 0, groups)].set(-jnp.inf)
    picks = jax.random.categorical(k_pick, popularity, shape=(rows,))
    return jnp.bincount(picks, length=groups).astype(jnp.int32)

# Independent dimensions (each row of lhs meets only its group's weights): the TPU estimator may shrink these and
# extrapolate; the work itself depends on the group sizes, so the estimate is floored by the task's FLOPs.
PARALLEL_DIMS = ("M",)


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (lhs[M, K], rhs[num_groups, K, N], group_sizes[num_groups] int32 summing to M)."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3 = keys(seed, 3)
    lhs = draw(k1, (d["M"], d["K"]), dtype, seed)
    rhs = weight(k2, (d["num_groups"], d["K"], d["N"]), dtype, seed, fan_in=d["K"])
    return lhs, rhs, _group_sizes(k3, d["M"], d["num_groups"])


def workload(lhs, rhs, group_sizes):
    """jax.lax.ragged_dot with f32 accumulation, returned in the inputs' dtype."""
    return lax.ragged_dot(lhs, rhs, group_sizes, preferred_element_type=jnp.float32).astype(lhs.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    return 2 * d["M"] * d["K"] * d["N"]
