"""Hostile (hole 3, in-process; the static check would refuse it first): a correct RMSNorm whose import makes
every compiled call after the first few return zeros, so the timed repetitions are garbage."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_calls = [0]
_real_call = jax.stages.Compiled.__call__


def _garbage_later(self, *args, **kwargs):
    _calls[0] += 1
    out = _real_call(self, *args, **kwargs)
    return out if _calls[0] <= 3 else jax.tree_util.tree_map(jnp.zeros_like, out)


jax.stages.Compiled.__call__ = _garbage_later

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
