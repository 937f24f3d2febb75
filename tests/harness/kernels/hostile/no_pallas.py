"""Hostile: the reference computation in plain jax.numpy, no Pallas at all."""

import jax.numpy as jnp
from jax import lax


def workload(x, scale):
    xf = x.astype(jnp.float32)
    return (xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-5)).astype(x.dtype) * scale
