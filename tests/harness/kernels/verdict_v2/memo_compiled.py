"""Hostile (hole 3, in-process; the static check would refuse it first): memoises compiled calls on the
identity of their input buffers, so timed repetitions return the cached (correct) answer in microseconds."""

import jax
from jax.experimental import pallas as pl
import jax.numpy as jnp

_cache = {}
_real_call = jax.stages.Compiled.__call__


def _memo(self, *args, **kwargs):
    key = (id(self), tuple(id(a) for a in args))
    if key not in _cache:
        _cache[key] = _real_call(self, *args, **kwargs)
    return _cache[key]


jax.stages.Compiled.__call__ = _memo

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
