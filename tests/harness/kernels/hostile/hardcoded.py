"""Hostile: computes the answer for the one input it can predict (seed 0) at import and returns it as a constant."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from jaxbench._common import draw, keys

_k1, _k2 = keys(0, 2)
_x = draw(_k1, (2, 64, 256), jnp.bfloat16, 0).astype(jnp.float32)
_s = draw(_k2, (256,), jnp.bfloat16, 0, scale=0.5, shift=1.0)
ANSWER = (_x * jax.lax.rsqrt(jnp.mean(_x * _x, -1, keepdims=True) + 1e-5)).astype(jnp.bfloat16) * _s


def workload(x, scale):
    def body(i_ref, o_ref):
        o_ref[...] = i_ref[...]

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(ANSWER)
