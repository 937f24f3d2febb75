"""Pallas kernel for the ported SwiGLU MLP task: a block of rows per grid step against the whole (smoke-sized)
weights, both projections and the down-projection fused, f32 accumulation, the hidden rounded to x's dtype."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_NT = (((1,), (1,)), ((), ()))  # a @ b.T: nn.Linear keeps weights as [out, in]


def _kernel(x_ref, wg_ref, wu_ref, wd_ref, o_ref):
    x = x_ref[...]  # [rows, D]
    gate = jax.lax.dot_general(x, wg_ref[...], _NT, preferred_element_type=jnp.float32)  # [rows, F]
    up = jax.lax.dot_general(x, wu_ref[...], _NT, preferred_element_type=jnp.float32)
    hidden = (jax.nn.silu(gate) * up).astype(x.dtype)
    o_ref[...] = jax.lax.dot_general(hidden, wd_ref[...], _NT, preferred_element_type=jnp.float32).astype(o_ref.dtype)


def workload(x, w_gate, w_up, w_down):
    t, d = x.shape  # x: [T, D]; w_gate, w_up: [F, D]; w_down: [D, F]
    f = w_gate.shape[0]
    rows = 128 if t % 128 == 0 else t
    whole = lambda shape: pl.BlockSpec(shape, lambda i: (0, 0))  # noqa: E731
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((t, d), x.dtype),
        grid=(t // rows,),
        in_specs=[pl.BlockSpec((rows, d), lambda i: (i, 0)), whole((f, d)), whole((f, d)), whole((d, f))],
        out_specs=pl.BlockSpec((rows, d), lambda i: (i, 0)),
    )(x, w_gate, w_up, w_down)
