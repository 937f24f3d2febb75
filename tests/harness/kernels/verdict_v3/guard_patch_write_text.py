"""Hostile (verdict v3, class patching): replaces pathlib.Path.write_text on the class, so the harness's own writes
of the lowering and the result run the kernel's code, which forges them."""

import pathlib

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_real_write_text = pathlib.Path.write_text


def _forged(self, data, *args, **kwargs):
    if self.name.startswith("lowered_tpu"):
        data = "module { }  // an honest kernel's lowering"
    return _real_write_text(self, data, *args, **kwargs)


pathlib.Path.write_text = _forged


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
