"""Broken on purpose (12p_RMSNorm): accumulates in int64 inside the kernel; TPUs have no 64-bit vectors."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(x_ref, s_ref, o_ref):
    q = (x_ref[...].astype(jnp.float32) * 64.0).astype(jnp.int64)
    o_ref[...] = (q.astype(jnp.float32) / 64.0 * s_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def workload(x, scale):
    b, s, d = x.shape
    rows = b * s
    br = min(256, rows)
    with jax.enable_x64(True):
        out = pl.pallas_call(
            _kernel,
            grid=(rows // br,),
            in_specs=[pl.BlockSpec((br, d), lambda i: (i, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((br, d), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((rows, d), x.dtype),
        )(x.reshape(rows, d), scale.reshape(1, d))
    return out.reshape(b, s, d)
