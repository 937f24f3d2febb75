"""Hostile (verdict v3, hole 1, in-process; the allow-list and the guard would stop it first): the compiled
callable's call is replaced on the instance (the watch snapshots classes, not instances, and the class patch that
reaches the instance is undone at once). The memo answers a call on buffers it has seen from its cache, after a
sleep of a quarter of the real call's time, and a call on buffers it has not seen, once the checked runs are done,
with its last answer: timed repetitions on the checked buffers came back 'identical to the checked outputs' and
about 4x faster."""

import time

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_real_compile = jax.stages.Lowered.compile


def _memoised(compiled):
    cache, cost = {}, []

    def real(*args, **kwargs):
        outs, _, _ = jax.stages.Compiled.call(compiled._params, *args, **kwargs)
        return outs

    def call(*args, **kwargs):
        key = tuple(id(a) for a in args)
        if key in cache:
            time.sleep(cost[0] / 4)
            return cache[key]
        if len(cache) >= 3 and cost:  # the checked runs are done: every later call is a timed one
            time.sleep(cost[0] / 4)
            return cache[next(reversed(cache))]
        t0 = time.perf_counter()
        out = jax.block_until_ready(real(*args, **kwargs))
        cost[:] = [time.perf_counter() - t0]
        cache[key] = out
        return out

    compiled._call = call
    return compiled


def _compile(self, *args, **kwargs):
    jax.stages.Lowered.compile = _real_compile  # undone at once: the watch finds the class as it was
    return _memoised(_real_compile(self, *args, **kwargs))


jax.stages.Lowered.compile = _compile


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
