"""JAX port of the torch attention function: scores in the input dtype, softmax in float32, causal mask."""

import jax.numpy as jnp


def attention(q, k, v, causal=True):
    # q, k, v: [B, H, S, D]
    seq = q.shape[-2]
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5
    if causal:
        above = jnp.triu(jnp.ones((seq, seq), dtype=bool), k=1)
        scores = jnp.where(above, -jnp.inf, scores)
    probs = jax_softmax(scores.astype(jnp.float32)).astype(q.dtype)
    return jnp.einsum("bhqk,bhkd->bhqd", probs, v)


def jax_softmax(s):
    s = s - jnp.max(s, axis=-1, keepdims=True)
    e = jnp.exp(s)
    return e / jnp.sum(e, axis=-1, keepdims=True)
