"""Hostile: the first trace (the one the census, the TPU lowering and the estimate read) is a cheap program that
skips the normalisation; every later trace (the one the interpreter runs and the outputs are checked from) is an
honest RMSNorm. The twin-trace comparison must see two programs."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

_TRACES = []


def workload(x, scale):
    _TRACES.append(len(_TRACES))
    honest = len(_TRACES) > 1

    def body(x_ref, s_ref, o_ref):
        v = x_ref[...].astype(jnp.float32)
        if honest:
            v = v * lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + 1e-5)
        o_ref[...] = (v.astype(o_ref.dtype).astype(jnp.float32) * s_ref[...].astype(jnp.float32)).astype(o_ref.dtype)

    rows, emb = x.shape[0] * x.shape[1], x.shape[2]
    out = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((rows, emb), x.dtype))(
        x.reshape(rows, emb), scale.reshape(1, emb))
    return out.reshape(x.shape)
