"""Broken on purpose (12p_RMSNorm): reads 128 lanes at a dynamic offset that is only a multiple of 64."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(x_ref, s_ref, o_ref):
    j = pl.program_id(1)
    x = x_ref[:, pl.ds(j * 64, 128)].astype(jnp.float32)  # start j*64: not provably lane-aligned
    o_ref[...] = (x * 2.0).astype(o_ref.dtype)


def workload(x, scale):
    b, s, d = x.shape
    rows = b * s
    x2 = x.reshape(rows, d)
    br = min(256, rows)
    out = pl.pallas_call(
        _kernel,
        grid=(rows // br, d // 128 - 1),
        in_specs=[pl.BlockSpec((br, d), lambda i, j: (i, 0)), pl.BlockSpec((1, d), lambda i, j: (0, 0))],
        out_specs=pl.BlockSpec((br, 128), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((rows, d - 128), x.dtype),
    )(x2, scale.reshape(1, d))
    return out
