"""Hostile (hole 6): an int8-quantised GEMM (per-row / per-column scales) inside Pallas. Its max-normalised error
(~0.015) passes the bf16 bound of 0.02; it loses several times more precision than XLA's bf16 GEMM."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(qa_ref, qb_ref, sa_ref, sb_ref, o_ref):
    acc = jnp.dot(qa_ref[...], qb_ref[...], preferred_element_type=jnp.int32).astype(jnp.float32)
    o_ref[...] = (acc * sa_ref[...] * sb_ref[...]).astype(o_ref.dtype)


def _quantise(x, axis):
    xf = x.astype(jnp.float32)
    s = jnp.max(jnp.abs(xf), axis=axis, keepdims=True) / 127.0
    return jnp.round(xf / s).astype(jnp.int8), s


def workload(a, b):
    m, _ = a.shape
    _, n = b.shape
    qa, sa = _quantise(a, 1)  # sa: [M, 1]
    qb, sb = _quantise(b, 0)  # sb: [1, N]
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype))(qa, qb, sa, sb)
