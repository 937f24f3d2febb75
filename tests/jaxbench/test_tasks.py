"""Every suite task: interface, static sizes, smoke run, baseline within tolerance, non-degenerate output."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbench
from maxkernel.harness.verdict.numerics import reference_outputs, rel_error
from maxkernel.tasks import load_task

NAMES = jaxbench.task_names()
SEEDS = (0, 1, 2)  # one per input distribution


def _leaves(x):
    return [np.asarray(v) for v in jax.tree_util.tree_leaves(x)]


@pytest.mark.unit
@pytest.mark.parametrize("name", NAMES)
def test_interface_and_full_size_is_static(name):
    task = load_task(name)
    cfg = task.config
    assert {"name", "model", "operator"} <= set(cfg)
    assert "smoke" in task.sizes and task.seedable
    assert task.flops("full") > 0 and task.flops("smoke") > 0
    # Full size traces abstractly: every size that shapes an array is static, nothing is allocated.
    shapes = jax.eval_shape(lambda: task.create_inputs(size="full", seed=0))
    out = jax.eval_shape(task.module.workload, *shapes)
    assert jax.tree_util.tree_leaves(out)


@pytest.mark.unit
@pytest.mark.parametrize("name", NAMES)
def test_smoke_inputs_are_seeded_and_mixed_sign(name):
    task = load_task(name)
    a = task.create_inputs(size="smoke", seed=0)
    b = task.create_inputs(size="smoke", seed=0)
    c = task.create_inputs(size="smoke", seed=3)  # seed 0's distribution (seed % 3): its draws compile nothing new
    floats = [i for i, x in enumerate(a) if jnp.issubdtype(x.dtype, jnp.floating)]
    assert floats, "a task needs at least one floating input"
    for i in floats:
        np.testing.assert_array_equal(np.asarray(a[i], np.float32), np.asarray(b[i], np.float32))
        assert float(jnp.min(a[i])) < 0 < float(jnp.max(a[i])), f"input {i} is not mixed-sign"
    assert any(not np.array_equal(np.asarray(a[i], np.float32), np.asarray(c[i], np.float32)) for i in floats)


@pytest.mark.parametrize("name", NAMES)
def test_baseline_passes_and_degenerate_outputs_fail(name):
    task = load_task(name)
    refs = {}
    for seed in SEEDS:
        inputs = task.create_inputs(size="smoke", seed=seed)
        refs[seed] = reference_outputs(task.module.workload, inputs)
        got = _leaves(jax.jit(task.module.workload)(*inputs))
        assert len(got) == len(refs[seed])
        for out, ref in zip(got, refs[seed]):
            tol = task.tolerance(str(out.dtype))
            err = rel_error(out, ref)
            assert err <= tol, f"seed {seed}: baseline error {err:.3g} > tolerance {tol}"
    # Zeros, the best constant and another seed's output must all fail on at least one output leaf.
    for seed in SEEDS:
        other = refs[SEEDS[(SEEDS.index(seed) + 1) % len(SEEDS)]]
        got = _leaves(jax.jit(task.module.workload)(*task.create_inputs(size="smoke", seed=seed)))
        for label, fake in (
            ("zeros", [np.zeros_like(r) for r in refs[seed]]),
            ("constant", [np.full_like(r, (r.max() + r.min()) / 2) for r in refs[seed]]),
            ("other seed", other),
        ):
            errs = [rel_error(f, r) / task.tolerance(str(g.dtype)) for f, r, g in zip(fake, refs[seed], got)]
            assert max(errs) > 2.0, f"seed {seed}: {label} output is within 2x tolerance ({max(errs):.2f}x)"
