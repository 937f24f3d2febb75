"""Hostile (census, hole 5): the GEMM runs as lax.ragged_dot in XLA (an op the old census counted as zero FLOPs);
a token Pallas copy of the result keeps a pallas_call in the path."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def workload(a, b):
    m, _ = a.shape
    prod = lax.ragged_dot(a, b[None], jnp.array([m], jnp.int32), preferred_element_type=jnp.float32)
    out = prod.astype(a.dtype)
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(out.shape, out.dtype))(out)
