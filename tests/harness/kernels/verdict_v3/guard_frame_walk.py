"""Hostile (verdict v3, frame walk): climbs from its own frame into the harness's and switches race detection off
in the job's settings (the harness must have read them already; the guard refuses the walk itself)."""

import sys

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_frame = sys._getframe().f_back
while _frame is not None:
    if isinstance(_frame.f_locals.get("job"), dict):
        _frame.f_locals["job"]["detect_races"] = False
    _frame = _frame.f_back


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
