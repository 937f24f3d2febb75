"""xprof_capture on CPU (a real sandboxed profile), and the trace parser on a synthetic TPU-shaped XSpace."""

from pathlib import Path

import pytest

from maxkernel.harness.estimate import xplane as _xplane
from maxkernel.harness.jobs.profile_job import _region, condense, pallas_custom_calls
from maxkernel.tools.xprof_capture import xprof_capture

RMSNORM = Path(__file__).resolve().parents[1] / "harness" / "kernels" / "rmsnorm_rows.py"


@pytest.mark.integration
def test_profile_of_rmsnorm_on_cpu(tmp_path):
    out = tmp_path / "prof"
    r = xprof_capture("12p_RMSNorm", str(RMSNORM), size="smoke", out_dir=str(out))
    assert r.ok, r.summary
    assert r.backend == "cpu" and r.cpu_note and "not tpu performance" in r.cpu_note.lower()
    assert "not TPU time" in r.summary
    trace = Path(r.trace)
    assert trace.is_file() and trace.name.endswith(".xplane.pb")
    assert trace.relative_to(out).parts[:2] == ("plugins", "profile")  # the layout TensorBoard/XProf opens
    assert r.ops and r.n_ops >= len(r.ops) and all(op.time_ms >= 0 and 0 <= op.share <= 1 for op in r.ops)
    assert r.baseline_ops
    assert r.kernel_ms > 0 and r.baseline_ms > 0
    roof = r.roofline
    assert roof.chip == "v5e" and roof.flops == 5 * 2 * 64 * 256 and roof.bytes > 0
    assert roof.bound == "memory" and roof.bound_ms > 0 and roof.fraction is None  # not measured on a v5e


@pytest.mark.integration
def test_kernel_failing_at_import_is_a_result(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('block shape table missing')\n")
    r = xprof_capture("12p_RMSNorm", str(bad), out_dir=str(tmp_path / "prof"))
    assert not r.ok and r.stage == "import"
    assert "block shape table missing" in r.summary and r.trace is None
    assert not (tmp_path / "prof").exists()


@pytest.mark.unit
def test_unknown_task_and_missing_kernel_are_results(tmp_path):
    assert not xprof_capture("no_such_task", str(RMSNORM)).ok
    r = xprof_capture("12p_RMSNorm", str(tmp_path / "missing.py"))
    assert not r.ok and "not found" in r.summary


@pytest.mark.unit
def test_pallas_custom_calls_are_found_in_hlo():
    hlo = ('  %custom-call.3 = bf16[8,128]{1,0} custom-call(bf16[8,128]{1,0} %p), '
           'custom_call_target="tpu_custom_call"\n'
           '  ROOT custom-call.4 = f32[4]{0} custom-call(f32[4]{0} %q), custom_call_target="__gpu$xla.gpu.triton"\n'
           '  %cb = () custom-call(), custom_call_target="xla_python_cpu_callback"\n')
    assert pallas_custom_calls(hlo) == ["custom-call.3", "custom-call.4"]


@pytest.mark.unit
def test_interpreter_errors_lose_their_embedded_stack():
    msg = ('JaxRuntimeError: INTERNAL: CpuCallback error: Traceback (most recent call last):\n'
           '  File "/x/callback.py", line 71, in __call__\n    return f()\n'
           'IndexError: Out-of-bounds block index (4, 0) for input "x_ref"')
    assert condense(msg).splitlines() == [msg.splitlines()[0], "  ...", msg.splitlines()[-1]]


# A TPU-shaped trace: host annotations, device modules and ops (times in ns from the line start at 1000 ns).
_SPACE = """
planes { id: 1 name: "/host:CPU"
  lines { id: 1 name: "python" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 100000000 }
    events { metadata_id: 2 offset_ps: 200000000 duration_ps: 100000000 } }
  event_metadata { key: 1 value { id: 1 name: "baseline" } }
  event_metadata { key: 2 value { id: 2 name: "kernel" } } }
planes { id: 2 name: "/device:TPU:0"
  lines { id: 1 name: "XLA Modules" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 10000000 duration_ps: 50000000 }
    events { metadata_id: 2 offset_ps: 210000000 duration_ps: 60000000 } }
  lines { id: 2 name: "XLA Ops" timestamp_ns: 1000
    events { metadata_id: 3 offset_ps: 10000000 duration_ps: 40000000 }
    events { metadata_id: 4 offset_ps: 210000000 duration_ps: 45000000 }
    events { metadata_id: 5 offset_ps: 255000000 duration_ps: 15000000 } }
  event_metadata { key: 1 value { id: 1 name: "jit_baseline(4)" } }
  event_metadata { key: 2 value { id: 2 name: "jit_kernel(7)" } }
  event_metadata { key: 3 value { id: 3 name: "fusion.1" } }
  event_metadata { key: 4 value { id: 4 name: "custom-call.2" } }
  event_metadata { key: 5 value { id: 5 name: "copy.3" } } }
"""


@pytest.mark.unit
def test_device_planes_give_the_pallas_call_time():
    from jax.profiler import ProfileData

    planes = [_xplane._plane(p) for p in ProfileData.from_text_proto(_SPACE).planes]
    events = _xplane.op_events(planes)
    kern = _region(planes, events, "kernel", 1, ["custom-call.2"])
    assert kern["source"] == "device" and kern["pallas_ms"] == pytest.approx(0.045)
    assert kern["time_ms"] == pytest.approx(0.060)
    assert [o["name"] for o in kern["ops"]] == ["custom-call.2", "copy.3"]
    assert kern["ops"][0]["share"] == pytest.approx(0.75)
    base = _region(planes, events, "baseline", 1, [])
    assert base["source"] == "device" and base["time_ms"] == pytest.approx(0.040) and base["pallas_ms"] is None
