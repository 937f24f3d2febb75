"""Each real-world operator against an independent implementation (tests/jaxbench/independent/): the task's own
workload, run on float32 inputs at the smoke size of every config and on two seeds, must match a float64 numpy
implementation written from the operator's published definition. A baseline that drops a term (the RG-LRU's
sqrt(1 - a^2) input normalisation, a softmax's sink, a conv's bias) fails here, where its self-consistency checks
stay green."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbench
from jaxbench._common import dims
from maxkernel.tasks import load_task

NAMES = jaxbench.task_names("realworld")
SEEDS = (0, 1)


def independent(name: str):
    return importlib.import_module(f"independent.{name}")


def cases() -> list:
    out = []
    for name in NAMES:
        task = load_task(name)
        sizes = list(task.config_sizes("smoke").values()) or ["smoke"]
        out += [pytest.param(name, size, id=f"{name}-{size}") for size in sizes]
    return out


def as_numpy(x):
    a = np.asarray(x)
    if a.dtype.kind == "f" or a.dtype == jnp.bfloat16 or "float8" in str(a.dtype):
        return np.asarray(jnp.asarray(x, jnp.float32)).astype(np.float64)
    return a


def relative_error(got, want) -> float:
    got, want = as_numpy(got).astype(np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    return float(np.max(np.abs(got - want))) / scale if want.size else 0.0


@pytest.mark.unit
def test_every_realworld_task_has_an_independent_implementation():
    for name in NAMES:
        mod = independent(name)
        assert callable(mod.reference) and mod.BREAKS, name
        assert len(mod.__doc__ or "") > 80, f"{name}: say what the reference is written from and how it differs"


@pytest.mark.slow  # a jit compile per case: seconds each, out of the unit tier
@pytest.mark.parametrize("name,size", cases())
def test_each_operator_matches_its_independent_implementation(name, size):
    task = load_task(name)
    mod = independent(name)
    module = task.module
    config = dims(module.CONFIG, module.SIZES, size, getattr(module, "CONFIGS", None))
    dtype = getattr(mod, "DTYPE", jnp.float32)
    for seed in SEEDS:
        inputs = task.create_inputs(size=size, seed=seed, dtype=dtype)
        got = jax.jit(module.workload)(*inputs)
        want = mod.reference(*[as_numpy(x) for x in inputs], config=config)
        got_leaves = got if isinstance(got, (tuple, list)) else (got,)
        want_leaves = want if isinstance(want, (tuple, list)) else (want,)
        assert len(got_leaves) == len(want_leaves), (name, len(got_leaves), len(want_leaves))
        if hasattr(mod, "check"):
            mod.check([as_numpy(g) for g in got_leaves], list(want_leaves), config)
            continue
        tol = getattr(mod, "TOLERANCE", 2e-4)
        for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
            err = relative_error(g, w)
            assert err <= tol, f"{name} {size} seed {seed} output {i}: error {err:.3g} of max|ref| > {tol}"
