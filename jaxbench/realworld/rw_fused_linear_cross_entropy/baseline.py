"""rw_fused_linear_cross_entropy: the Llama-3.1-8B LM head fused with its mean token cross-entropy, forward and
backward (per-token losses, dh, dW), shapes from meta-llama/Llama-3.1-8B's config.json."""

import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

# hidden_size 4096 and vocab_size 128256 are Llama-3.1-8B's config.json; 8192 tokens per device is one sequence of
# the 8K context Llama 3 was pretrained at (Meta's "The Llama 3 Herd of Models").
CONFIG = {
    "name": "llama3_1_8b_fused_linear_cross_entropy",
    "model": "Llama-3.1-8B",
    "operator": "fused_linear_cross_entropy",
    "batch_tokens": 8192,
    "hidden_dim": 4096,
    "vocab_size": 128256,
}
# 1152 = 9 * 128, like 128256 = 1002 * 128 a lane multiple that power-of-two vocabulary tiles do not divide.
SIZES = {"smoke": {"batch_tokens": 256, "hidden_dim": 128, "vocab_size": 1152}}

IGNORE_INDEX = -100  # the label of a token the loss skips (prompt or padding positions), as in PyTorch and HF
IGNORED_FRACTION = 0.125  # share of the labels drawn as IGNORE_INDEX
# Hidden states are drawn this wide (the LM head's weight is 1/sqrt(hidden_dim)), so the logits spread over a few
# units like a trained model's and the softmax over the vocabulary is peaked, not flat.
HIDDEN_SCALE = 3.0
# Tokens per step of workload's loop. All 8192 at once would make XLA hold the f32 logits and their gradient
# (2 x 8192 x 128256 x 4 bytes = 7.8 GiB) next to everything else; a block of 1024 tokens bounds each at 0.5 GiB.
# The mean divides by the count of all non-ignored tokens, so the sum over blocks is the whole batch's loss.
TOKEN_CHUNK = 1024

# Independent dimensions: per-token losses and rows of dh are independent per token, and dW sums over tokens, so
# the work is linear in them; the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("batch_tokens",)


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (hidden[batch_tokens, hidden_dim], lm_head[vocab_size, hidden_dim] (the PyTorch layout of the
    output projection's weight), labels[batch_tokens] int32 in [0, vocab_size) or IGNORE_INDEX)."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3, k4 = keys(seed, 4)
    hidden = draw(k1, (d["batch_tokens"], d["hidden_dim"]), dtype, seed, scale=HIDDEN_SCALE)
    lm_head = weight(k2, (d["vocab_size"], d["hidden_dim"]), dtype, seed, fan_in=d["hidden_dim"])
    labels = jax.random.randint(k3, (d["batch_tokens"],), 0, d["vocab_size"], jnp.int32)
    ignored = jax.random.bernoulli(k4, IGNORED_FRACTION, (d["batch_tokens"],))
    return hidden, lm_head, jnp.where(ignored, IGNORE_INDEX, labels)


def workload(hidden, lm_head, labels):
    """loss = mean over non-ignored tokens of logsumexp(logits) - logits[label], logits = hidden @ lm_head^T in f32,
    and its gradients from jax.value_and_grad, block by block of tokens (the loss is a sum over blocks, so each
    block's gradient is its share of the whole one); dW is summed over blocks in f32.

    Returns (losses[batch_tokens] f32, dh[batch_tokens, hidden_dim], dW[vocab_size, hidden_dim]), the gradients in
    the inputs' dtype. The per-token losses (0 at ignored tokens) are returned instead of their mean, sum(losses) /
    count(labels != IGNORE_INDEX), so that a constant cannot match the output: a scalar is its own best constant.
    """
    tokens, hidden_dim = hidden.shape
    vocab = lm_head.shape[0]
    chunk = math.gcd(tokens, TOKEN_CHUNK)
    count = jnp.maximum(jnp.sum(labels != IGNORE_INDEX), 1).astype(jnp.float32)

    def block_loss(h, w, lab):
        logits = jnp.einsum("th,vh->tv", h, w, preferred_element_type=jnp.float32)
        kept = lab != IGNORE_INDEX
        target = jnp.take_along_axis(logits, jnp.where(kept, lab, 0)[:, None], axis=-1)[:, 0]
        per_token = jnp.where(kept, jax.nn.logsumexp(logits, axis=-1) - target, 0.0)
        return jnp.sum(per_token) / count, per_token

    loss_and_grads = jax.value_and_grad(block_loss, argnums=(0, 1), has_aux=True)

    def step(dw_sum, block):
        h, lab = block
        (_, per_token), (dh, dw) = loss_and_grads(h, lm_head, lab)
        return dw_sum + dw.astype(jnp.float32), (per_token, dh)

    blocks = (hidden.reshape(tokens // chunk, chunk, hidden_dim), labels.reshape(tokens // chunk, chunk))
    dw, (losses, dh) = lax.scan(step, jnp.zeros((vocab, hidden_dim), jnp.float32), blocks)
    return losses.reshape(tokens), dh.reshape(tokens, hidden_dim), dw.astype(lm_head.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    logits = d["batch_tokens"] * d["vocab_size"]
    # Three matmuls (logits, dh, dW) of 2 * tokens * hidden * vocab each; the softmax and its gradient add about
    # five operations a logit.
    return 6 * logits * d["hidden_dim"] + 5 * logits
