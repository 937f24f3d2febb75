"""rw_topk_topp_sampling_mask: top-k then top-p (nucleus) filtering of a decode batch's next-token distribution over
the Llama 3 vocabulary, with per-request k and p; vocabulary from meta-llama/Llama-3.1-8B-Instruct's config.json."""

import math

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

# vocab_size 128256 is Llama-3.1-8B-Instruct's config.json; 256 requests is vLLM's default max_num_seqs, the most
# sequences one decode step samples for.
CONFIG = {
    "name": "llama3_topk_topp_sampling_mask",
    "model": "Llama-3.1-8B-Instruct",
    "operator": "topk_topp_sampling_mask",
    "batch": 256,
    "vocab_size": 128256,
}
# 1152 = 9 * 128, like 128256 = 1002 * 128 a lane multiple that power-of-two vocabulary tiles do not divide.
SIZES = {"smoke": {"batch": 8, "vocab_size": 1152}}

# Logits are drawn this wide, so a request's top few hundred tokens spread over several units as a language model's
# do (for the normal and heavy-tailed draws; uniform draws stay flat at the top, a hard case for top-p).
LOGIT_SCALE = 4.0
# Per-request top-k is drawn log-uniform in [1, K_MAX] (20 in Qwen2.5's and 50 in Hugging Face's defaults), so
# that in many rows k, not p, ends the kept set; top-p is drawn in P_RANGE (0.9 in Llama-3.1-8B-Instruct's
# generation_config.json), then moved by create_inputs (see there).
K_MAX = 128
P_RANGE = (0.5, 0.99)
# Least probability of the token at which a request's nucleus ends: p is placed half of it away from both
# cumulative sums it falls between, far beyond any f32 rounding of a sum over at most K_MAX terms.
MIN_GAP = 1e-3
# Spacing between the top K_MAX + 1 logits of a row, as a fraction of its largest |logit| (at least 2^7 f32 ulps).
TIE_BREAK = 2.0 ** -16

# Independent dimensions (every request is filtered on its own row): the TPU estimator may shrink these and
# extrapolate.
PARALLEL_DIMS = ("batch",)


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (logits[batch, vocab_size] f32, top_k[batch] int32 in [1, K_MAX], top_p[batch] f32 in (0, 1)).

    Samplers filter f32 logits (vLLM upcasts them before sampling), so every input is f32 whatever `dtype` says.
    Nothing in the output is left to how a kernel breaks ties or rounds a sum:
    - a row's K_MAX + 1 largest logits are strictly apart: each logit is lowered by TIE_BREAK * max|row| times its
      rank (ranks past K_MAX all by the same amount), so the k-th largest is unique and ordering by logit or by
      probability agree;
    - top_p is drawn in P_RANGE, then moved to the middle of the step of the top-k distribution's cumulative sum it
      falls in (to a higher step if that token's probability is under MIN_GAP), so the nucleus is the same for any
      summation order.
    """
    del dtype
    d = dims(CONFIG, SIZES, size)
    batch, vocab = d["batch"], d["vocab_size"]
    k_logits, k_k, k_p = keys(seed, 3)
    raw = draw(k_logits, (batch, vocab), jnp.float32, seed, scale=LOGIT_SCALE)
    rank = jnp.argsort(jnp.argsort(-raw, axis=-1), axis=-1)  # 0 for the row's largest logit
    step = TIE_BREAK * jnp.max(jnp.abs(raw), axis=-1, keepdims=True)
    logits = raw - step * jnp.minimum(rank, K_MAX + 1).astype(jnp.float32)

    k_max = min(K_MAX, vocab)
    log_k = jax.random.uniform(k_k, (batch,), jnp.float32, 0.0, math.log(k_max + 1))
    top_k = jnp.clip(jnp.floor(jnp.exp(log_k)), 1, k_max).astype(jnp.int32)
    top, _ = jax.lax.top_k(logits, k_max)  # descending
    in_k = jnp.arange(k_max)[None, :] < top_k[:, None]
    e = jnp.where(in_k, jnp.exp(top - top[:, :1]), 0.0)
    q = e / jnp.sum(e, axis=-1, keepdims=True)
    above = jnp.cumsum(q, axis=-1) - q  # probability of the tokens ranked above each one
    p0 = jax.random.uniform(k_p, (batch,), jnp.float32, *P_RANGE)
    last = jnp.sum(in_k & (above < p0[:, None]), axis=-1) - 1  # the nucleus of p0 ends at this rank
    # q falls with rank and q[0] >= 1 / K_MAX > MIN_GAP, so the ranks whose q reaches MIN_GAP are a non-empty prefix.
    last = jnp.minimum(last, jnp.sum(in_k & (q >= MIN_GAP), axis=-1) - 1)
    pick = lambda a: jnp.take_along_axis(a, last[:, None], axis=-1)[:, 0]
    top_p = pick(above) + 0.5 * pick(q)
    return logits, top_k, top_p


def workload(logits, top_k, top_p):
    """Keep each row's top_k largest logits, then of those the fewest highest-ranked whose probability (softmax over
    the top-k) reaches top_p (a token is kept while the probability ranked above it is under top_p); returns
    softmax over the kept tokens, f32[batch, vocab], 0 at the filtered ones: the distribution the token is sampled
    from."""
    vocab = logits.shape[-1]
    desc = jnp.flip(jnp.sort(logits, axis=-1), axis=-1)
    k = jnp.clip(top_k, 1, vocab)
    kth = jnp.take_along_axis(desc, (k - 1)[:, None], axis=-1)
    in_k = desc >= kth
    e = jnp.where(in_k, jnp.exp(desc - desc[:, :1]), 0.0)
    q = e / jnp.sum(e, axis=-1, keepdims=True)
    above = jnp.cumsum(q, axis=-1) - q
    kept = jnp.sum(in_k & (above < top_p[:, None]), axis=-1)  # at least 1: nothing ranks above the first
    threshold = jnp.take_along_axis(desc, (kept - 1)[:, None], axis=-1)
    w = jnp.where(logits >= threshold, jnp.exp(logits - desc[:, :1]), 0.0)
    return w / jnp.sum(w, axis=-1, keepdims=True)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    # Per logit: the top-k softmax (compare, subtract, exp, sum, divide), its cumulative sum and the top-p compare,
    # and the final softmax (compare, subtract, exp, sum, divide): about 12 operations; the sort's comparisons
    # are not counted.
    return 12 * d["batch"] * d["vocab_size"]
