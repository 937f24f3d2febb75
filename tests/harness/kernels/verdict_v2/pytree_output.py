"""Hostile (hole 7): the output is an instance of a registered pytree class, not an array: the harness would
flatten it more than once, and a class like this can hand the timer one thing and the checker another."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


@jax.tree_util.register_pytree_node_class
class Boxed:
    def __init__(self, value):
        self.value = value

    def tree_flatten(self):
        return (self.value,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


def _kernel(x_ref, s_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = (x * jax.lax.rsqrt(ms + 1e-5)).astype(o_ref.dtype) * s_ref[...]


def workload(x, scale):
    b, s, d = x.shape
    flat = x.reshape(b * s, d)
    out = pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(flat.shape, x.dtype))(flat, scale.reshape(1, d))
    return Boxed(out.reshape(b, s, d))
