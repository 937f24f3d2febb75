"""Hostile (hole 8, in-process; the static check would refuse it first): the DMA race of dma_race.py, plus an
import that walks up the stack and switches the harness's race detector off in the job's settings."""

import sys

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_frame = sys._getframe(0)
while _frame is not None:
    for _name in ("job", "races", "detect_races"):
        if isinstance(_frame.f_locals.get("job"), dict):
            _frame.f_locals["job"]["detect_races"] = False
    _frame = _frame.f_back
def _kernel(x_hbm, s_ref, o_ref, buf, sem):
    rows = buf.shape[0]
    i = pl.program_id(0)
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(i * rows, rows)], buf, sem)
    copy.start()
    x = buf[...].astype(jnp.float32)  # races with the DMA still writing buf
    copy.wait()
    o_ref[...] = (x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-5)).astype(o_ref.dtype) * s_ref[...]


def workload(x, scale):
    b, s, d = x.shape
    flat = x.reshape(b * s, d)
    rows = 32
    out = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct(flat.shape, x.dtype),
        grid=(b * s // rows,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec((1, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((rows, d), lambda i: (i, 0)),
        scratch_shapes=[pltpu.VMEM((rows, d), x.dtype), pltpu.SemaphoreType.DMA],
    )(flat, scale.reshape(1, d))
    return out.reshape(b, s, d)
