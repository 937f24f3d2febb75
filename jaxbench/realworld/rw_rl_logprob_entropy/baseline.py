"""rw_rl_logprob_entropy: per-token log-probability of the sampled token and softmax entropy, as GRPO/PPO training
computes them from the Qwen2.5-7B policy's logits; shapes from Qwen/Qwen2.5-7B's config.json."""

import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys

# vocab_size 152064 is Qwen2.5-7B's config.json. 8192 tokens is one log-prob micro-batch per device: half of verl's
# default ppo_max_token_len_per_gpu (16384), so that the inputs of several seeds fit a v5e next to the f32 reference.
CONFIG = {
    "name": "qwen2_5_7b_rl_logprob_entropy",
    "model": "Qwen2.5-7B",
    "operator": "logprob_entropy",
    "batch_tokens": 8192,
    "vocab_size": 152064,
}
# 1152 = 9 * 128, like 152064 = 1188 * 128 a lane multiple that power-of-two vocabulary tiles do not divide.
SIZES = {"smoke": {"batch_tokens": 256, "vocab_size": 1152}}

# The rollout's sampling temperature, divided out of the logits before the log-softmax (as verl does): 0.7 is the
# temperature in Qwen2.5-7B-Instruct's generation_config.json.
TEMPERATURE = 0.7
# Each token's logits are drawn with its own scale, log-uniform in this range, so that some positions are nearly
# certain (entropy near 0) and others nearly flat (entropy near log(vocab)), as a policy's are.
LOGIT_SCALES = (0.5, 6.0)
# Tokens per step of workload's loop: bounds each f32 temporary at 1024 x 152064 x 4 bytes = 0.6 GiB instead of
# holding the whole [batch_tokens, vocab] logits in f32 (4.6 GiB a copy). Rows are independent, so the result is
# the same.
TOKEN_CHUNK = 1024
# Tokens per block of create_inputs' draws: the random draws and the sampling hold several f32 copies of a block
# (about 2 GiB at 256 tokens on XLA's CPU backend, 8 GiB at 1024), never of the whole logits.
DRAW_CHUNK = 256

# Independent dimensions (every token's outputs depend only on its own row of logits): the TPU estimator may
# shrink these and extrapolate.
PARALLEL_DIMS = ("batch_tokens",)


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (logits[batch_tokens, vocab_size], token_ids[batch_tokens] int32), the ids sampled from
    softmax(logits / TEMPERATURE) as the rollout sampled them."""
    d = dims(CONFIG, SIZES, size)
    tokens, vocab = d["batch_tokens"], d["vocab_size"]
    chunk = math.gcd(tokens, DRAW_CHUNK)
    k_logits, k_scale, k_sample = keys(seed, 3)
    lo, hi = math.log(LOGIT_SCALES[0]), math.log(LOGIT_SCALES[1])
    scales = jnp.exp(jax.random.uniform(k_scale, (tokens // chunk, chunk, 1), jnp.float32, lo, hi))

    def block(args):
        k_draw, k_pick, scale = args
        logits = (draw(k_draw, (chunk, vocab), jnp.float32, seed) * scale).astype(dtype)
        ids = jax.random.categorical(k_pick, logits.astype(jnp.float32) / TEMPERATURE, axis=-1)
        return logits, ids.astype(jnp.int32)

    n = tokens // chunk
    args = (jax.random.split(k_logits, n), jax.random.split(k_sample, n), scales)
    if n == 1:  # one block (the smoke size): drawn op by op, without compiling a loop
        logits, ids = block(jax.tree_util.tree_map(lambda a: a[0], args))
    else:
        logits, ids = lax.map(block, args)
    return logits.reshape(tokens, vocab), ids.reshape(tokens)


def workload(logits, token_ids):
    """z = logits / TEMPERATURE in f32; returns (log_softmax(z)[token_id], -sum(softmax(z) * log_softmax(z))), both
    f32[batch_tokens], block by block of tokens."""
    tokens, vocab = logits.shape
    chunk = math.gcd(tokens, TOKEN_CHUNK)

    def rows(block):
        x, ids = block
        z = x.astype(jnp.float32) / TEMPERATURE
        lse = jax.nn.logsumexp(z, axis=-1)
        p = jnp.exp(z - lse[:, None])
        entropy = lse - jnp.sum(p * z, axis=-1)
        logprob = jnp.take_along_axis(z, ids[:, None], axis=-1)[:, 0] - lse
        return logprob, entropy

    blocks = (logits.reshape(tokens // chunk, chunk, vocab), token_ids.reshape(tokens // chunk, chunk))
    logprob, entropy = lax.map(rows, blocks)
    return logprob.reshape(tokens), entropy.reshape(tokens)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    # A logit: the temperature divide, the max, subtract and exp of the logsumexp and its sum, the probability
    # (subtract, exp) and the product and sum of the entropy: about 8 operations.
    return 8 * d["batch_tokens"] * d["vocab_size"]
