"""Device timing from a profile: per-run sums of a module's device ops inside each host annotation."""

import pytest

from maxkernel.harness.jobs.device_timing import device_ms_per_run
from maxkernel.harness.estimate.xplane import Event, Line, Plane

pytestmark = pytest.mark.unit


def _tpu_trace():
    host = Plane("/host:CPU", [Line("python", [Event("maxkernel_kernel", 0, 1000), Event("maxkernel_kernel", 2000, 1000)])], {})
    modules = Line("XLA Modules", [Event("jit_kernel(3)", 100, 500), Event("jit_kernel(3)", 2100, 700),
                                   Event("jit_baseline(1)", 1200, 300)])
    ops = Line("XLA Ops", [Event("custom-call.1", 120, 400), Event("fusion.2", 2150, 600),
                           Event("fusion.9", 1210, 250)])
    return [host, Plane("/device:TPU:0", [modules, ops], {})]


def test_tpu_shaped_trace_gives_one_sample_per_run():
    got = device_ms_per_run(_tpu_trace(), "maxkernel_kernel", "jit_kernel")
    assert got == [400 / 1e6, 600 / 1e6]


def test_cpu_trace_has_no_device_samples():
    host = Plane("/host:CPU", [Line("python", [Event("maxkernel_kernel", 0, 1000)])], {})
    assert device_ms_per_run([host], "maxkernel_kernel", "jit_kernel") == []
