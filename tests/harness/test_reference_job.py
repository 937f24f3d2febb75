"""The reference job's body, in process: seeded inputs and reference outputs on disk, and the task's metadata."""

import time

import numpy as np
import pytest

from maxkernel.harness.jobs import reference_job
from maxkernel.harness.jobs import timers
from maxkernel.harness.verdict.arrays import load_arrays

pytestmark = pytest.mark.unit


def test_reference_job_writes_references_calibration_and_baseline_timing(tmp_path):
    out = reference_job.run({"task": "12p_RMSNorm", "size": "smoke", "seeds": [0, 1], "reps": 3}, tmp_path)
    assert out["status"] == "ok" and out["audit"] is None
    meta = out["meta"]
    assert meta["out_shapes"] == [[2, 64, 256]] and meta["flops"] > 0 and meta["baseline_flops"] > 0
    assert meta["tolerances"] == [2e-2] and meta["out_dtypes"] == ["bfloat16"]
    a, b = load_arrays(tmp_path / "ref_0.npz"), load_arrays(tmp_path / "ref_1.npz")
    assert a[0].shape == (2, 64, 256) and not np.array_equal(a[0], b[0])  # seeds give different data
    # the judge makes the inputs; the parent hands them to the candidate only after its kernel is compiled
    assert len(load_arrays(tmp_path / "inputs_0.npz")) == 2 and (tmp_path / "inputs_1.npz").is_file()
    # XLA's own bf16 program against the f32 reference: the yardstick the calibrated bound is built from
    [err] = meta["baseline_errors"]
    assert 1e-4 < err["fro"] < 1e-2 and 1e-4 < err["max"] < 2e-2
    timing = out["timing"]
    assert len(timing["baseline_ms"]) == 3 and timing["window"][1] - timing["window"][0] >= sum(timing["baseline_ms"]) / 1e3


def test_replaced_timers_are_named(monkeypatch):
    assert timers.replaced_timers() == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert timers.replaced_timers() == ["perf_counter"]


def test_the_judges_inputs_are_a_persons_and_a_warm_judge_compiles_nothing_for_fresh_seeds(tmp_path):
    """The inputs the judge hands the candidate for a seed are bit for bit what `create_inputs(seed=...)` gives a
    person (a jitted draw fuses and can differ in the last bit); and a judge that served one verdict draws the next
    one's fresh seeds (same distributions, seed % 3) without compiling anything."""
    from jax._src import monitoring

    from maxkernel.tasks import load_task

    task = load_task("8p_GEMM")  # its jitted draws differ from a person's in the last bf16 bit on most seeds
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    assert reference_job.run({"task": task.name, "size": "smoke", "seeds": [30, 31, 32], "reps": 0}, first)["status"] == "ok"
    for i, seed in enumerate((30, 31, 32)):
        mine = [np.asarray(x) for x in task.create_inputs(size="smoke", seed=seed)]
        theirs = load_arrays(first / f"inputs_{i}.npz")
        assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(mine, theirs)), seed

    compiles = []

    def listen(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(duration)

    monitoring.register_event_duration_secs_listener(listen)
    try:
        out = reference_job.run({"task": task.name, "size": "smoke", "seeds": [93, 94, 95], "reps": 0}, second)
    finally:
        monitoring.unregister_event_duration_listener(listen)
    assert out["status"] == "ok" and compiles == []
