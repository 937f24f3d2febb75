"""rw_moe_permute_unpermute: DeepSeek-V3 MoE token dispatch and combine (permute token copies into expert order, a
per-expert transform, unpermute and weight); shapes from deepseek-ai/DeepSeek-V3's config.json (hidden_size 7168,
n_routed_experts 256, num_experts_per_tok 8) and the tokens per device of DeepEP's benchmarks (4096 tokens per batch
for its normal kernels, the DeepSeek-V3 pre-training setting; 128 for its low-latency decode kernels)."""

from functools import partial

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "deepseek_v3_moe_permute_unpermute",
    "model": "DeepSeek-V3",
    "operator": "moe_permute_unpermute",
    "tokens": 4096,  # tokens on one device per MoE layer call (DeepEP's normal-kernel setting)
    "hidden_size": 7168,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "routed_scaling_factor": 2.5,  # DeepSeek-V3 multiplies the normalised top-k gates by this
}
# 32 experts keep top-8 routing sparse (a quarter of the experts per token) at the smoke size.
SIZES = {"smoke": {"tokens": 256, "hidden_size": 256, "n_routed_experts": 32},
         "smoke@decode": {"tokens": 16}}
# prefill: a device's share of a prompt batch; decode: one new token for each of 128 sequences (DeepEP's
# low-latency setting).
CONFIGS = {"prefill": {}, "decode": {"tokens": 128}}

# Independent dimensions (tokens are routed independently; hidden columns never mix): the TPU estimator may shrink
# these and extrapolate.
PARALLEL_DIMS = ("tokens", "hidden_size")


@partial(jax.jit, static_argnames=("tokens", "experts", "top_k", "scaling"))
def _assemble(key, activations, seed_logits, *, tokens, experts, top_k, scaling):
    """x and expert_scale from one [tokens + E, hidden] draw (one random program fewer to compile for each new
    seed's distribution); distinct top-k expert ids per token under uneven expert popularity (the busiest expert
    gets about 3x the mean load at full size, as under real load imbalance), and their combine weights: sigmoid scores normalised over the k chosen and scaled,
    as DeepSeek-V3's router does. Gumbel noise makes ties between experts impossible in practice."""
    x, expert_scale = activations[:tokens], activations[tokens:]
    k_pop, k_noise = jax.random.split(key)
    popularity = 0.5 * jax.random.normal(k_pop, (experts,))
    logits = popularity[None, :] + jax.random.gumbel(k_noise, (tokens, experts))
    _, ids = jax.lax.top_k(logits, top_k)
    scores = jax.nn.sigmoid(seed_logits)
    weights = scores / jnp.sum(scores, axis=-1, keepdims=True) * scaling
    return x, ids.astype(jnp.int32), weights.astype(activations.dtype), expert_scale


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[tokens, hidden_size], expert_ids[tokens, k] int32, weights[tokens, k], expert_scale[E,
    hidden_size]): the tokens, each token's k distinct routed experts (valid ids in [0, E)), their combine
    weights (positive, summing to routed_scaling_factor per token), and a per-expert, per-channel scale that stands
    in for the expert FFN so that a token copy sent to the wrong expert changes the result."""
    d = dims(CONFIG, SIZES, size, CONFIGS)
    kx, kr, kw = keys(seed, 3)
    t, e, k = d["tokens"], d["n_routed_experts"], d["num_experts_per_tok"]
    activations = draw(kx, (t + e, d["hidden_size"]), dtype, seed)
    return _assemble(kr, activations, draw(kw, (t, k), jnp.float32, seed), tokens=t, experts=e, top_k=k,
                     scaling=float(d["routed_scaling_factor"]))


def workload(x, expert_ids, weights, expert_scale):
    """Dispatch: the T*k token copies sorted by expert id (a stable sort, so within an expert the copies keep
    token order), gathered into permuted[T*k, hidden]; each copy is scaled by its expert's scale (f32, rounded to
    the dtype as an expert's output would be); combine: the copies scattered back to [T, k, hidden] and summed with
    the gate weights in f32. Returns (combined[T, hidden], permuted[T*k, hidden]), both in x's dtype."""
    t, k = expert_ids.shape
    flat_ids = expert_ids.reshape(t * k)
    order = jnp.argsort(flat_ids, stable=True)  # position in expert order -> flat (token, slot) index
    permuted = jnp.take(x, order // k, axis=0)  # [T*k, hidden], grouped by expert
    sorted_ids = jnp.take(flat_ids, order)
    expert_out = (permuted.astype(jnp.float32) * jnp.take(expert_scale, sorted_ids, axis=0).astype(jnp.float32))
    expert_out = expert_out.astype(x.dtype)
    unpermuted = jnp.zeros_like(expert_out).at[order].set(expert_out, unique_indices=True)
    combined = jnp.einsum("tkh,tk->th", unpermuted.reshape(t, k, -1).astype(jnp.float32),
                          weights.astype(jnp.float32))
    return combined.astype(x.dtype), permuted


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size, CONFIGS)
    copies = d["tokens"] * d["num_experts_per_tok"] * d["hidden_size"]
    return 3 * copies  # one multiply per copy by its expert's scale, one multiply-add per copy in the combine
