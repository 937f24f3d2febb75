"""Broken (12p_RMSNorm): the input index map is shifted by one block, so the last step reads past the end."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(x_ref, s_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    o_ref[...] = (x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-5)).astype(o_ref.dtype) * s_ref[...]


def workload(x, scale):
    b, s, d = x.shape
    flat = x.reshape(b * s, d)
    rows = 32
    out = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct(flat.shape, x.dtype),
        grid=(b * s // rows,),
        in_specs=[pl.BlockSpec((rows, d), lambda i: (i + 1, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((rows, d), lambda i: (i, 0)),
    )(flat, scale.reshape(1, d))
    return out.reshape(b, s, d)
