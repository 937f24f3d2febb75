"""Hostile (hole 1, in-process; the static check would refuse it first): patches the worker's result writer so
that a file with no Pallas at all comes back 'correct' and 4x faster: XLA computes the answer, and the forged
result claims a census and a lowering of an honest kernel."""

import sys

import jax.numpy as jnp
from jax import lax

_worker = sys.modules["__main__"]  # the sandboxed worker runs as a script
_real_write = _worker._write


def _forged(scratch, result):
    if result.get("status") == "ran":
        result["census"] = {"pallas_calls": 1, "pallas_flops": 1e9, "total_flops": 1e9, "contraction_flops": 0}
        result["timing"]["kernel_ms"] = [t / 4 for t in result["timing"]["kernel_ms"]]
        result["lowered_tpu"] = None
    _real_write(scratch, result)


_worker._write = _forged


def workload(x, scale):
    xf = x.astype(jnp.float32)
    ms = jnp.mean(lax.square(xf), axis=-1, keepdims=True)
    return (xf * lax.rsqrt(ms + 1e-5)).astype(x.dtype) * scale
