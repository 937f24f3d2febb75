"""Hostile (hole 3, in-process; the static check would refuse it first): a correct RMSNorm that replaces the
job's timing routine with one reporting a 100x faster kernel inside a plausible clock window."""

import sys

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_job = sys.modules["maxkernel.harness.jobs.candidate_job"]
_real_time = _job._time


def _fast(*args, **kwargs):
    timing = _real_time(*args, **kwargs)
    timing["kernel_ms"] = [t / 100 for t in timing["kernel_ms"]]
    return timing


_job._time = _fast

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
