"""JAX port of the Llama-style RMSNorm module: the statistics in float32, the scale applied after the cast back."""

import jax.numpy as jnp
from jax import lax


def rmsnorm(x, weight, eps=1e-6):
    # x: [T, H]; weight: [H] (the module's parameter, a trailing input)
    xf = x.astype(jnp.float32)
    normed = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return normed.astype(x.dtype) * weight
