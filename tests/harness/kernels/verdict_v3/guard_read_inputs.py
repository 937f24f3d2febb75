"""Hostile (verdict v3, input lookup): the inputs arrive in the kernel's own folder; it reads them (in workload, at
trace time) to hand back answers computed from them."""

import pathlib

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_inputs = pathlib.Path(__file__).parent / "inputs_0.npz"


def _peek():
    with open(_inputs, "rb") as f:
        return f.read(16)


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


_workload = workload


def workload(x, scale):
    _peek()
    return _workload(x, scale)
