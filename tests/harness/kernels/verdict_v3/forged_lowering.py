"""Hostile (verdict v3, hole 1, in-process; the allow-list, the guard and the watch would each stop it first): XLA
computes the answer, and the TPU lowering the harness hands to the judge is swapped for the lowering of an honest
Pallas RMSNorm over the same shapes. Today's judge censuses that lowering (Pallas share 1.0) while the candidate's
own trace holds no pallas_call; the verdict must see that the two accounts disagree."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from maxkernel import chips

_real_as_text = jax.stages.Lowered.as_text


def _norm(x_ref, s_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = (x * lax.rsqrt(ms + 1e-5)).astype(o_ref.dtype) * s_ref[...]


def _honest(x, scale):
    b, s, d = x.shape
    flat = x.reshape(b * s, d)
    rows = min(64, b * s)
    out = pl.pallas_call(_norm, out_shape=jax.ShapeDtypeStruct(flat.shape, x.dtype), grid=(b * s // rows,),
                         in_specs=[pl.BlockSpec((rows, d), lambda i: (i, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
                         out_specs=pl.BlockSpec((rows, d), lambda i: (i, 0)))(flat, scale.reshape(1, d))
    return out.reshape(b, s, d)


def _forged(self, *args, **kwargs):
    text = _real_as_text(self, *args, **kwargs)
    if "tpu_custom_call" in text or "sharding" not in text and "stablehlo" not in text:
        return text
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in jax.tree_util.tree_leaves(self.args_info)]
    with chips.trace_context(chips.get("v5e")):
        lowered = jax.jit(_honest).trace(*structs).lower(lowering_platforms=("tpu",))
    return _real_as_text(lowered, *args, **kwargs)


jax.stages.Lowered.as_text = _forged


def workload(x, scale):
    xf = x.astype(jnp.float32)
    ms = jnp.mean(lax.square(xf), axis=-1, keepdims=True)
    return (xf * lax.rsqrt(ms + 1e-5)).astype(x.dtype) * scale
