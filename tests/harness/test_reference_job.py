"""The reference job's body, in process: seeded inputs and reference outputs on disk, and the task's metadata."""

import time

import numpy as np
import pytest

from maxkernel.harness import reference_job, timers
from maxkernel.harness.arrays import load_arrays

pytestmark = pytest.mark.unit


def test_reference_job_writes_inputs_references_and_meta(tmp_path):
    out = reference_job.run({"task": "12p_RMSNorm", "size": "smoke", "seeds": [0, 1]}, tmp_path)
    assert out["status"] == "ok" and out["seeds"] == [0, 1]
    meta = out["meta"]
    assert meta["out_shapes"] == [[2, 64, 256]] and meta["flops"] > 0 and meta["baseline_flops"] > 0
    assert meta["tolerances"] == [2e-2] and meta["out_dtypes"] == ["bfloat16"]
    a, b = load_arrays(tmp_path / "ref_0.npz"), load_arrays(tmp_path / "ref_1.npz")
    assert a[0].shape == (2, 64, 256) and not np.array_equal(a[0], b[0])  # seeds give different data
    assert len(load_arrays(tmp_path / "inputs_0.npz")) == 2


def test_replaced_timers_are_named(monkeypatch):
    assert timers.replaced_timers() == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert timers.replaced_timers() == ["perf_counter"]
