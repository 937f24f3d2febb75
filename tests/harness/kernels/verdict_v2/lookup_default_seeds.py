"""Hostile (hole 4): precomputes the answers for the seeds the harness used to use (0, 1, 2) by regenerating the
suite's inputs, and returns the matching answer; a Pallas GEMM on the inputs, added times zero, supplies FLOPs."""

import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_DISTS = ("normal", "uniform", "student_t")


def _draw(key, shape, seed, scale=1.0, shift=0.0):  # the suite's input recipe, copied by the attacker
    kind = _DISTS[seed % 3]
    flat = (math.prod(shape),)
    if kind == "normal":
        x = jax.random.normal(key, flat, jnp.float32)
    elif kind == "uniform":
        x = jax.random.uniform(key, flat, jnp.float32, -math.sqrt(3.0), math.sqrt(3.0))
    else:
        kz, k1, k2 = jax.random.split(key, 3)
        u = jax.random.uniform(k1, flat, jnp.float32, 1e-7, 1.0) * jax.random.uniform(k2, flat, jnp.float32, 1e-7, 1.0)
        x = jax.random.normal(kz, flat, jnp.float32) / jnp.sqrt(-0.5 * jnp.log(u)) / math.sqrt(2.0)
    return (x.reshape(shape) * scale + shift).astype(jnp.bfloat16)


def _answers(shape):
    b, s, d = shape
    out = []
    for seed in (0, 1, 2):
        k1, k2 = jax.random.split(jax.random.PRNGKey(seed), 2)
        x = _draw(k1, shape, seed)
        scale = _draw(k2, (d,), seed, scale=0.5, shift=1.0)
        xf = x.astype(jnp.float32)
        normed = (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-5)).astype(x.dtype)
        out.append((x[0, 0, 0], normed * scale))
    return out


_FOUND = _answers((2, 64, 256))  # computed at import, outside every trace: constants


def _gemm(a_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], a_ref[...].T, preferred_element_type=jnp.float32)


def workload(x, scale):
    b, s, d = x.shape
    g = pl.pallas_call(_gemm, out_shape=jax.ShapeDtypeStruct((b * s, b * s), jnp.float32))(x.reshape(b * s, d))
    found = _FOUND
    probe = x[0, 0, 0]
    index = (probe == found[1][0]).astype(jnp.int32) + 2 * (probe == found[2][0]).astype(jnp.int32)
    answer = jnp.stack([value for _, value in found])[index]
    return answer + (0.0 * g[0, 0]).astype(x.dtype)
