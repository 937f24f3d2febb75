"""Hostile (verdict v3, hole 2): an honest Pallas RMSNorm at exactly the smoke shape, and at every other shape a
cheap Pallas copy of its input (wrong, and priced at its memory floor). Correct on today's smoke-only check; the
drawn check size catches it."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

SMOKE = (2, 64, 256)


def _norm(x_ref, s_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = (x * jax.lax.rsqrt(ms + 1e-5)).astype(o_ref.dtype) * s_ref[...]


def _copy(x_ref, s_ref, o_ref):
    o_ref[...] = x_ref[...]


def workload(x, scale):
    b, s, d = x.shape
    flat = x.reshape(b * s, d)
    rows = min(64, b * s)
    body = _norm if x.shape == SMOKE else _copy
    out = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(flat.shape, x.dtype), grid=(b * s // rows,),
                         in_specs=[pl.BlockSpec((rows, d), lambda i: (i, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
                         out_specs=pl.BlockSpec((rows, d), lambda i: (i, 0)))(flat, scale.reshape(1, d))
    return out.reshape(b, s, d)
