"""rw_moe_tgmm: the MoE backward's grouped transposed matmul (megablox "tgmm", the expert weight gradient
dW[e] = x_e^T @ grad_e over each expert's rows) for Qwen3-30B-A3B; shapes from Qwen/Qwen3-30B-A3B's config.json
(hidden_size 2048, moe_intermediate_size 768, num_experts 128, num_experts_per_tok 8) and a 4096-token sequence per
device (the Qwen3 technical report's pre-training sequence length)."""

import math
from functools import partial

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "qwen3_30b_a3b_moe_tgmm",
    "model": "Qwen3-30B-A3B",
    "operator": "grouped_matmul_transposed",
    "seq_len": 4096,  # tokens per device; each is routed to num_experts_per_tok experts
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "emb_dim": 2048,
    "moe_mlp_dim": 768,
    "projection": "wi",
}
SIZES = {"smoke": {"seq_len": 64, "num_experts": 16, "num_experts_per_tok": 4, "emb_dim": 256, "moe_mlp_dim": 128}}
# wi: the gradient of a gate or up projection, x[T, emb_dim]^T @ d(pre-activation)[T, moe_mlp_dim] per expert;
# wo: the gradient of the down projection, h[T, moe_mlp_dim]^T @ d(out)[T, emb_dim] per expert.
CONFIGS = {"wi": {}, "wo": {"projection": "wo"}}

# Rows per tile of workload's reference. A tile that straddles expert boundaries is used once per expert it holds
# (rows of other experts masked off), so the reference does at most (T / ROW_TILE + E) tile products: 1.5x the
# useful work at full size. Masking all T rows for every expert instead (what ragged_dot_general's dense fallback
# does) would take E times the work and an [E, T, K] temporary (45 GiB at full size).
ROW_TILE = 128

# Independent dimensions (the token rows add up linearly; output rows and columns are independent): the TPU
# estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("seq_len", "emb_dim", "moe_mlp_dim")


@partial(jax.jit, static_argnames=("rows", "groups"))
def _group_sizes(key, *, rows, groups):
    """Uneven expert loads summing to `rows`: log-normal popularity (hot and cold experts, as under real load
    imbalance), with one expert in 32 (at least one) receiving no rows at all."""
    k_pop, k_empty, k_pick = jax.random.split(key, 3)
    popularity = jax.random.normal(k_pop, (groups,))
    empty = jax.random.permutation(k_empty, groups)[: max(1, groups // 32)]
    popularity = popularity.at[empty].set(-jnp.inf)
    picks = jax.random.categorical(k_pick, popularity, shape=(rows,))
    return jnp.bincount(picks, length=groups).astype(jnp.int32)


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (lhs[T, K], grad[T, N], group_sizes[E] int32) with T = seq_len * num_experts_per_tok token-expert
    rows sorted by expert (group e owns rows sum(group_sizes[:e]) up to sum(group_sizes[:e+1]); the sizes are
    non-negative and sum to T); K, N = emb_dim, moe_mlp_dim for wi and moe_mlp_dim, emb_dim for wo. grad is scaled
    by 1/sqrt(T / E) so an average expert's dW entries are O(1)."""
    d = dims(CONFIG, SIZES, size, CONFIGS)
    kl, kg, ks = keys(seed, 3)
    rows, groups = d["seq_len"] * d["num_experts_per_tok"], d["num_experts"]
    k_dim, n_dim = ((d["emb_dim"], d["moe_mlp_dim"]) if d["projection"] == "wi"
                    else (d["moe_mlp_dim"], d["emb_dim"]))
    lhs = draw(kl, (rows, k_dim), dtype, seed)
    grad = draw(kg, (rows, n_dim), dtype, seed, scale=math.sqrt(groups / rows))
    return lhs, grad, _group_sizes(ks, rows=rows, groups=groups)


def workload(lhs, grad, group_sizes):
    """dW[e] = lhs[rows of e]^T @ grad[rows of e] with f32 accumulation, [E, K, N] in lhs's dtype (an expert with
    no rows gets zeros). Computed tile by tile: each (row tile, expert) pair whose rows overlap is one work item,
    an item's rows outside its expert are masked to zero, and the items' f32 products are summed per expert."""
    rows, k_dim = lhs.shape
    n_dim = grad.shape[1]
    groups = group_sizes.shape[0]
    tm = math.gcd(rows, ROW_TILE)
    tiles = rows // tm
    items = tiles + groups  # static bound: sum over experts of tiles touched <= tiles + experts - 1

    ends = jnp.cumsum(group_sizes)
    starts = ends - group_sizes
    first_tile = starts // tm
    count = jnp.where(group_sizes > 0, (ends - 1) // tm - first_tile + 1, 0)  # tiles each expert touches
    item_end = jnp.cumsum(count)
    i = jnp.arange(items)
    group = jnp.searchsorted(item_end, i, side="right")  # the expert of item i (groups: past the last item)
    valid = group < groups
    group = jnp.minimum(group, groups - 1)
    tile = jnp.where(valid, first_tile[group] + i - (item_end - count)[group], 0)

    row = tile[:, None] * tm + jnp.arange(tm)[None, :]  # [items, tm]
    mask = valid[:, None] & (row >= starts[group][:, None]) & (row < ends[group][:, None])
    lhs_items = jnp.take(lhs.reshape(tiles, tm, k_dim), tile, axis=0)
    grad_items = jnp.take(grad.reshape(tiles, tm, n_dim), tile, axis=0)
    grad_items = jnp.where(mask[:, :, None], grad_items, jnp.zeros((), grad.dtype))
    partial_dw = jnp.einsum("itk,itn->ikn", lhs_items, grad_items, preferred_element_type=jnp.float32)
    dw = jax.ops.segment_sum(partial_dw, group, num_segments=groups, indices_are_sorted=True)
    return dw.astype(lhs.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size, CONFIGS)
    return 2 * d["seq_len"] * d["num_experts_per_tok"] * d["emb_dim"] * d["moe_mlp_dim"]
