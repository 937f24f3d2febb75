"""JAX port of RMSNorm (first try)."""

import jax.numpy as jnp
from jax import lax


def rmsnorm(x, weight, eps=1e-6):
    # x: [T, H]; weight: [H]
    xf = x.astype(jnp.float32)
    normed = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return normed.astype(x.dtype) * (1 + weight)
