"""Hostile (verdict v3, a sibling route into eval): functools.singledispatch's register resolves the annotation of
the function it registers through typing.get_type_hints, which evaluates the string as code."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


@functools.singledispatch
def _dispatch(x):
    return x


@_dispatch.register
def _(x: "__import__('gc').get_objects().__class__"):
    return x


def _kernel(x_ref, s_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = (x * jax.lax.rsqrt(ms + 1e-5)).astype(o_ref.dtype) * s_ref[...]


def workload(x, scale):
    b, s, d = x.shape
    flat = x.reshape(b * s, d)
    rows = min(64, b * s)
    out = pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(flat.shape, x.dtype), grid=(b * s // rows,),
                         in_specs=[pl.BlockSpec((rows, d), lambda i: (i, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
                         out_specs=pl.BlockSpec((rows, d), lambda i: (i, 0)))(flat, scale.reshape(1, d))
    return out.reshape(b, s, d)
