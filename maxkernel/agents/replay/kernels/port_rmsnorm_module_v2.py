"""JAX port of the Llama-style RMSNorm module: the statistics in float32, the scale applied after the cast back.

The scale is multiplied in float32 and rounded once: the same bf16 output as a bf16 multiply, but the weight's
gradient (a sum over every row) then accumulates in float32 as PyTorch's does, not in bf16."""

import jax.numpy as jnp
from jax import lax


def rmsnorm(x, weight, eps=1e-6):
    # x: [T, H]; weight: [H] (the module's parameter, a trailing input)
    xf = x.astype(jnp.float32)
    normed = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (normed.astype(x.dtype).astype(jnp.float32) * weight.astype(jnp.float32)).astype(x.dtype)
