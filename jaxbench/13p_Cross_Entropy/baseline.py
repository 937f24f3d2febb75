"""13p_Cross_Entropy: the Llama-3.1-8B LM head and token cross-entropy, per-token losses from hidden states."""

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "llama3_8b_cross_entropy",
    "model": "Llama-3.1-8B",
    "operator": "cross_entropy",
    "batch_tokens": 8192,
    "hidden_dim": 4096,
    "vocab_size": 128256,
}
# 1152 = 9 * 128, like 128256 = 1002 * 128 a lane multiple that power-of-two vocabulary tiles do not divide.
SIZES = {"smoke": {"batch_tokens": 64, "hidden_dim": 128, "vocab_size": 1152}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (hidden[batch_tokens, hidden_dim], unembedding[hidden_dim, vocab_size], labels[batch_tokens] int32)."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3 = keys(seed, 3)
    hidden = draw(k1, (d["batch_tokens"], d["hidden_dim"]), dtype, seed)
    unembedding = weight(k2, (d["hidden_dim"], d["vocab_size"]), dtype, seed)
    labels = jax.random.randint(k3, (d["batch_tokens"],), 0, d["vocab_size"], jnp.int32)
    return hidden, unembedding, labels


def workload(hidden, unembedding, labels):
    """Per-token losses logsumexp(logits) - logits[label], in f32 from f32 logits (the training loss is their mean).
    The vector is returned instead of the mean so that a constant cannot match it: a scalar is its own best
    constant."""
    logits = jnp.matmul(hidden, unembedding, preferred_element_type=jnp.float32)
    label_logits = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
    return jax.nn.logsumexp(logits, axis=-1) - label_logits


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    return 2 * d["batch_tokens"] * d["hidden_dim"] * d["vocab_size"] + 4 * d["batch_tokens"] * d["vocab_size"]
