"""Hostile (verdict v3, in-process; every in-process guard would stop it first): an honest Pallas RMSNorm whose
result writer is patched to say it ran on a TPU, where the CPU-only rules (labelled interpreter time, the TPU
lowering's census) would not apply."""

import sys

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_worker = sys.modules["__main__"]
_real_write = _worker._write


def _forged(scratch, result):
    if result.get("status") == "ran":
        result["backend"] = "tpu"
    _real_write(scratch, result)


_worker._write = _forged


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
