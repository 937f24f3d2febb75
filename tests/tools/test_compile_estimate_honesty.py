"""compile and estimate say what is true (issue 29): a task whose baseline.py fails is the task's fault, a plain-jnp
"kernel" is no Pallas kernel, compile's roofline bound is the estimate's floor, the share of roofline is held against
the task's floor (the kernel's own-traffic floor beside it), and the hint never offers the libtpu flag already tried."""

import functools
from pathlib import Path

import pytest
from _extras import need_module

from maxkernel import chips
from maxkernel.harness.jobs import compile_job
from maxkernel.harness.estimate import estimator as est
from maxkernel.settings import get_settings
from maxkernel.tasks import load_task
from maxkernel.tools.compile_pallas import compile_pallas

ROOT = Path(__file__).resolve().parents[2]
RMS_KERNEL = ROOT / "jaxbench" / "12p_RMSNorm" / "kernel.py"
V5E, V6E = chips.get("v5e"), chips.get("v6e")

BASELINE = '''
import jax
import jax.numpy as jnp

CONFIG = {"rows": 256, "cols": 512}
SIZES = {"smoke": {"rows": 64, "cols": 256}}


def create_inputs(dtype=jnp.float32, *, size="full", seed=42):
    d = {**CONFIG, **SIZES.get(size, {})}
    INPUTS_FAIL
    return (jax.random.normal(jax.random.key(seed), (d["rows"], d["cols"]), dtype),)


def workload(x):
    WORKLOAD_FAILS
    return x * 2.0


def get_flops(size="full"):
    return 256 * 512
'''
PALLAS_DOUBLE = '''
import jax
from jax.experimental import pallas as pl


def _k(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def workload(x):
    rows, cols = x.shape
    return pl.pallas_call(_k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(rows // 64,),
                          in_specs=[pl.BlockSpec((64, cols), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((64, cols), lambda i: (i, 0)))(x)
'''
PLAIN_RMS = '''
import jax.numpy as jnp
from jax import lax


def workload(x, scale):
    xf = x.astype(jnp.float32)
    ms = jnp.mean(lax.square(xf), axis=-1, keepdims=True)
    return (xf * lax.rsqrt(ms + 1e-5)).astype(x.dtype) * scale
'''


def broken_task(tmp_path: Path, where: str) -> str:
    folder = tmp_path / f"broken_{where}"
    folder.mkdir()
    boom = 'raise RuntimeError("boom")'
    (folder / "baseline.py").write_text(BASELINE.replace("INPUTS_FAIL", boom if where == "create_inputs" else "pass")
                                        .replace("WORKLOAD_FAILS", boom if where == "workload" else "pass"))
    return str(folder)


def write(tmp_path: Path, name: str, source: str) -> str:
    path = tmp_path / name
    path.write_text(source)
    return str(path)


# ---- 1. a broken baseline is the task's fault ------------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("where", ["workload", "create_inputs"])
def test_compile_against_a_broken_baseline_blames_the_task(tmp_path, where):
    r = compile_pallas(broken_task(tmp_path, where), write(tmp_path, "k.py", PALLAS_DOUBLE), "v5e")
    assert not r.ok and r.stage == "task", r.summary
    assert "baseline.py" in r.error and f"in its {where}" in r.error and "RuntimeError: boom" in r.error
    assert "task is at fault" in r.summary and "kernel was not compiled" in r.summary
    assert "lower" not in r.summary and r.hint is None  # no kernel advice for the task's failure


@pytest.mark.unit
@pytest.mark.parametrize("where", ["workload", "create_inputs"])
def test_estimate_against_a_broken_baseline_blames_the_task(tmp_path, where):
    r = est.estimate(broken_task(tmp_path, where), write(tmp_path, "k.py", PALLAS_DOUBLE), "v5e")
    assert not r.ok and r.stage == "task", r.summary
    assert "baseline.py" in r.error and f"in its {where}" in r.error and "RuntimeError: boom" in r.error
    assert "task is at fault" in r.summary and "PARALLEL_DIMS" not in r.summary + (r.hint or "")


@pytest.mark.unit
def test_the_compile_job_names_the_tasks_create_inputs(tmp_path):
    kernel = write(tmp_path, "k.py", PALLAS_DOUBLE)
    r = compile_job.run({"task": broken_task(tmp_path, "create_inputs"), "kernel": kernel, "chip": "v5e"}, tmp_path)
    assert (r["ok"], r["stage"]) == (False, "task") and "create_inputs" in r["error"] and "boom" in r["error"]
    assert r["hint"] is None


# ---- 2. plain jnp is not a Pallas kernel -----------------------------------------------------------------------

@pytest.mark.integration
def test_compile_says_plain_jnp_has_no_pallas_call(tmp_path):
    need_module("libtpu", extra="tpu")
    r = compile_pallas("12p_RMSNorm", write(tmp_path, "plain.py", PLAIN_RMS), "v5e", "smoke")
    assert not r.ok and r.stage == "no_pallas" and r.pallas_calls == 0, r.summary
    assert "no pallas_call" in r.summary and "OK" not in r.summary and "PARALLEL_DIMS" not in r.summary


@pytest.mark.integration
def test_estimate_prices_plain_jnp_as_xlas_program_and_says_it_is_not_a_kernel(tmp_path):
    """Plain jnp in the kernel slot is priced the way the baseline is (shrunk along the task's parallel dims, not
    refused for lacking blocks), and the figure says it is no Pallas kernel; compile still fails it (no_pallas)."""
    need_module("libtpu", extra="tpu")
    r = est.estimate("12p_RMSNorm", write(tmp_path, "plain.py", PLAIN_RMS), "v5e", "full")
    assert r.ok and r.estimated_ms and r.baseline_estimated_ms, r.summary
    assert "not a Pallas kernel" in r.summary and any("no pallas_call" in x for x in r.limits)
    assert r.estimated_ms == pytest.approx(r.baseline_estimated_ms, rel=0.1)  # the same computation, priced alike


# ---- 3. one roofline floor for compile and estimate ------------------------------------------------------------

@pytest.mark.integration
def test_compiles_roofline_bound_is_the_estimates_floor():
    need_module("libtpu", extra="tpu")
    c = compile_pallas("12p_RMSNorm", str(RMS_KERNEL), "v5e", "smoke")
    e = est.estimate_program(load_task("12p_RMSNorm"), str(RMS_KERNEL), V5E, "smoke")
    assert c.ok and c.pallas_calls == 1 and e.ok, (c.summary, e.error)
    assert c.roofline_ms == pytest.approx(max(e.floors.values()), rel=1e-9)
    assert c.roofline_ms == pytest.approx(e.roofline_ms, rel=1e-9)
    assert f"roofline bound {e.roofline_ms:.3f} ms" in c.summary


@pytest.mark.unit
def test_compiles_roofline_at_full_size_is_the_tasks_floor_not_the_kernels_declared_cost():
    from maxkernel.tools.compile_pallas import _result

    rms = _result({"ok": True, "chip": "v5e", "stage": "compile", "pallas_calls": 1}, "full",
                  est.task_work(load_task("12p_RMSNorm"), "full"))
    io = (2 * 8 * 4096 * 8192 + 8192) * 2  # x read once, out written once, scale once (bf16)
    assert rms.roofline_ms == pytest.approx(io / V5E.device_hbm_bytes_per_s * 1e3)  # 1.31 ms, not 1.456
    gemm = _result({"ok": True, "chip": "v6e", "stage": "compile", "pallas_calls": 1}, "full",
                   est.task_work(load_task("8p_GEMM"), "full"))
    assert gemm.roofline_ms == pytest.approx(2 * 8192 * 8192 * 28672 / V6E.device_peak_flops * 1e3)


@pytest.mark.unit
def test_an_int8_matmul_task_is_floored_at_the_chips_int8_rate():
    """rw_w8a8_int8_matmul's 3.85 T int8 matmul ops: 19.5 ms at v5e's bf16 peak, 9.8 ms at its int8 peak (393 TOPS).
    Floored at the bf16 rate, a kernel and XLA both at the int8 rate would read as priced below their floor."""
    from maxkernel.tools.compile_pallas import _result

    task = load_task("rw_w8a8_int8_matmul")
    flops, _, int8 = est.task_work(task, "full")
    mm = 2 * 8192 * 8192 * 28672
    assert int8 == mm and flops > mm
    got = _result({"ok": True, "chip": "v5e", "stage": "compile", "pallas_calls": 1}, "full", (flops, 0, int8))
    assert got.roofline_ms == pytest.approx((mm / 393e12 + (flops - mm) / 197e12) * 1e3)
    assert est.task_work(load_task("8p_GEMM"), "full")[2] == 0  # bf16 operands: the bf16 rate


# ---- 4. the share of roofline is against the task's floor ------------------------------------------------------

GEMM_FLOPS = 2 * 8192 * 8192 * 28672
GEMM_IO = 2 * (8192 * 8192 + 2 * 8192 * 28672)
# The 8p_GEMM kernel at tiles (512, 1024, 1024), full size: A and B blocks fetched every grid step, O once per tile.
STEPS = (8192 // 512) * (28672 // 1024) * (8192 // 1024)
GEMM_SPEC = STEPS * 2 * (512 * 1024 + 1024 * 1024) + (8192 // 512) * (28672 // 1024) * 2 * 512 * 1024


def gemm_lines(cycles_full: float) -> list[dict]:
    head = {"plan": {"shrunk_dims": ["M"], "full_dims": {"M": 8192, "K": 8192, "N": 28672}, "rejected": {}},
            "facts": {"pallas_calls": [{"name": "gemm", "grid": [16, 28, 8], "parallel": [True, True, False],
                                        "declared_bytes": GEMM_SPEC}], "data_dependent": []},
            "block_traffic": {"bytes": GEMM_SPEC, "notes": []}}
    return [head] + [{"point": {"dims": {"M": int(8192 * x)}, "x": x, "tiles": None,
                                "ops": {"gemm": int(cycles_full * x)}, "zero_cycle_bytes": {}, "compile_s": 1.0}}
                     for x in (1 / 16, 1 / 8, 1 / 4)]


@pytest.mark.unit
def test_the_share_of_roofline_is_against_the_tasks_floor_with_the_kernels_own_beside_it():
    base = dict(ok=False, program="kernel", chip="v6e", libtpu_flags=[], libtpu="test")
    e = est._fit(base, gemm_lines(1e6), load_task("8p_GEMM"), V6E, "full", GEMM_IO)  # cycles under every floor
    own = GEMM_SPEC / V6E.device_hbm_bytes_per_s * 1e3
    ideal = GEMM_FLOPS / V6E.device_peak_flops * 1e3
    assert e.ok and e.own_floor_ms == pytest.approx(own) and e.estimated_ms == pytest.approx(own)  # ~7.17 ms
    assert e.roofline_ms == pytest.approx(ideal)  # ~4.19 ms: the task's FLOPs at peak
    assert e.floors == pytest.approx({"compute_ms": ideal, "memory_ms": GEMM_IO / V6E.device_hbm_bytes_per_s * 1e3})
    assert e.fraction_of_roofline == pytest.approx(ideal / own) and e.fraction_of_roofline < 0.65  # not 100 %
    assert e.bound == "memory"  # what holds this kernel back: its own BlockSpec re-reads
    summary = est._combine(e, e.model_copy(update={"program": "baseline"}), V6E, "full", 0.0).summary
    assert f"{ideal / own:.0%} of the task's roofline" in summary and "own HBM traffic's floor" in summary


# ---- 5. no advice to use the flag that was already tried -------------------------------------------------------

@pytest.mark.unit
def test_xla_temporaries_crowding_vmem_at_a_profiled_size_are_retried_in_hbm(monkeypatch, tmp_path):
    """Met on 9p's kernel on v5e: at a shrunk size XLA put 80 MiB of its own temporaries in VMEM beside the
    kernel's 48 MiB scoped limit and the compile failed, though the full size compiles. The flag that keeps them in
    HBM is tried, and the estimate says it was; any other compile failure is the answer as it stands."""
    from maxkernel.harness.estimate.estimator import ProgramEstimate

    calls = []
    crowded = ("JaxRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory "
               "space vmem. Used 128.32M of 128.00M vmem.\n scoped 48.32M\n HLO temp 80.00M")

    def profile(task, kernel, chip, size, tunables, timeout, flags, error=crowded):
        calls.append(list(flags))
        if flags:
            return ProgramEstimate(ok=True, program="kernel", chip=chip.name, libtpu_flags=list(flags), limits=[],
                                   estimated_ms=1.0)
        return ProgramEstimate(ok=False, program="kernel", chip=chip.name, stage="compile", error=error,
                               libtpu_flags=[])

    monkeypatch.setattr(est, "_profile", profile)
    # A source of its own: the suite's estimate cache is shared, and a cached answer would skip the profile.
    source = PALLAS_DOUBLE + f"\n# {tmp_path.name}\n"
    r = est.estimate_program(load_task("12p_RMSNorm"), write(tmp_path, "k.py", source), V5E, "smoke")
    assert calls == [[], [est._RETRY_FLAG]] and r.ok
    assert any("crowded VMEM" in x and est._RETRY_FLAG in x for x in r.limits), r.limits
    calls.clear()
    monkeypatch.setattr(est, "_profile", lambda *a: profile(*a, error="Mosaic failed: block shape (7, 128)"))
    r = est.estimate_program(load_task("12p_RMSNorm"), write(tmp_path, "k2.py", source + "# 2\n"), V5E, "smoke")
    assert calls == [[]] and not r.ok and r.stage == "compile"


@pytest.mark.unit
def test_an_abort_the_retry_flag_did_not_cure_is_not_told_to_use_that_flag(monkeypatch, tmp_path):
    calls = []

    def aborting_profile(task, kernel, chip, size, tunables, timeout, flags):
        calls.append(list(flags))
        base = dict(ok=False, program="kernel", chip=chip.name, libtpu_flags=list(flags), libtpu="test")
        return est._crash(base, "F0101 00:00 dma.cc:1] Unsupported DMA direction: 10", [], get_settings())

    monkeypatch.setattr(est, "_profile", aborting_profile)
    r = est.estimate_program(load_task("12p_RMSNorm"), write(tmp_path, "k.py", PALLAS_DOUBLE), V5E, "smoke")
    assert calls == [[], [est._RETRY_FLAG]]  # the retry happened
    assert not r.ok and r.stage == "abort" and "retried with" in r.error
    assert r.hint and est._RETRY_FLAG not in r.hint, r.hint


@pytest.mark.unit
@pytest.mark.parametrize("stderr", ["F0101 x.cc:1] Unsupported DMA direction: 10", "F0101 x.cc:1] something else died"])
def test_the_flag_is_offered_only_before_it_was_tried(stderr):
    def crash(flags):
        base = dict(ok=False, program="kernel", chip="v5e", libtpu_flags=flags, libtpu="test")
        return est._crash(base, stderr, [], get_settings())

    assert est._RETRY_FLAG in crash([]).hint
    assert est._RETRY_FLAG not in crash([est._RETRY_FLAG]).hint


@pytest.mark.unit
def test_compile_errors_name_the_users_file_not_the_sandbox_copy():
    from maxkernel.tools.compile_pallas import users_file

    text = 'File "/tmp/s/w-1/kernel.py", line 3, in workload; kernel.py:12: block shape; my_kernel.py untouched'
    said = users_file(text, "/tmp/s/w-1/kernel.py", "/home/me/rms.py")
    assert said == 'File "/home/me/rms.py", line 3, in workload; /home/me/rms.py:12: block shape; my_kernel.py untouched'


@pytest.mark.unit
def test_the_address_space_guard_is_named_as_memory_not_a_dying_process():
    base = dict(ok=False, program="baseline", chip="v6e", libtpu_flags=[], libtpu="test")
    r = est._crash(base, "E1205 pjrt.cc:1] mmap error: 12 while reserving", [{"starting": {"batch": 4}}],
                   get_settings())
    assert r.stage == "memory" and "memory guard" in r.error and "batch" in r.error
    assert "MAXKERNEL_ESTIMATE_MEMORY_MB" in r.hint


def _crash_as(program: str, flags: list, stderr: str):
    """The estimate a profiling process that died with `stderr` gives `program` (kernel or baseline)."""
    base = dict(ok=False, program=program, chip="v5e", libtpu_flags=flags, libtpu="test")
    return est._crash(base, stderr, [], get_settings())


@pytest.mark.unit
def test_a_kernel_the_llo_type_check_rejects_is_told_the_known_rewrites():
    stderr = ("F1205 llo_module.cc:66] Check failed: TakeStatus() is OK (INTERNAL: LLO_CHECK failure "
              "(platforms/xla/service/jellyfish/llo_region.cc:393) type_check_result.ok() Expected vector)")
    crash = functools.partial(_crash_as, stderr=stderr)
    assert est._RETRY_FLAG in crash("kernel", []).hint  # the flag first
    hint = crash("kernel", [est._RETRY_FLAG]).hint
    assert "VMEM ref" in hint and "im2col" in hint and "multiple of 16" in hint and "64 lanes" in hint
    assert "computed in registers" in hint and "sublane stride" in hint
    assert crash("baseline", [est._RETRY_FLAG]).hint == est._UNPRICEABLE_HINT  # XLA's program: no rewrite to offer


@pytest.mark.unit
def test_a_kernel_whose_smem_operand_the_profiler_refuses_is_told_to_pass_it_in_vmem():
    """rw_mhc_stream_mixing with alpha and bias as BlockSpec(memory_space=SMEM) operands: libtpu's profiler aborted on
    the kernel (name.1) with an unsupported DMA direction; the same scalars as a [1, 128] VMEM row were priced."""
    stderr = ("F1207 llo_dumper.cc:1585] Static LLO profiling of name.1 failed: INVALID_ARGUMENT: Unsupported DMA "
              "direction: 10 on VL/VLP")
    crash = functools.partial(_crash_as, stderr=stderr)
    assert est._RETRY_FLAG in crash("kernel", []).hint  # the flag first
    assert "SMEM" in crash("kernel", [est._RETRY_FLAG]).hint and "[1, 128]" in crash("kernel", [est._RETRY_FLAG]).hint
    assert crash("baseline", [est._RETRY_FLAG]).hint == est._UNPRICEABLE_HINT


@pytest.mark.integration
def test_a_chip_libtpu_cannot_profile_is_said_at_once_with_what_it_can_do():
    """v4 and 7x: libtpu 0.0.42.1's profiler aborts on every program there. The estimate says so before any
    process starts (not after two aborted profiles), with the task's floors and where the compile still helps."""
    need_module("libtpu", extra="tpu")
    from maxkernel.harness.estimate.facts import libtpu_version

    if libtpu_version() not in est.UNPROFILED:
        pytest.skip(f"libtpu {libtpu_version()}: which chips it profiles is not recorded; estimate tries them all")
    for chip in ("v4", "7x"):
        r = est.estimate_program(load_task("12p_RMSNorm"), None, chips.get(chip), "full")
        assert not r.ok and r.stage == "chip" and "static profiler cannot price it" in r.error, r.error
        assert f"compile --chip {chip}" in r.hint and r.floors["memory_ms"] > 0 and r.wall_s == 0.0


@pytest.mark.unit
def test_a_cached_estimate_is_not_read_under_another_fingerprint_method(monkeypatch):
    """A cached estimate carries the fingerprints of the programs it priced; made under another fingerprint method it
    reads as "not the program checked" (1p's row, re-made after the fingerprint text changed, lost its speedup). The
    verdict's integrity code is part of the estimator's method digest, so such a cache is never read."""
    from pathlib import Path

    before = est._method_digest()
    real = Path.read_bytes

    def changed(self):
        data = real(self)
        return data + b"\n# changed" if self.name == "integrity.py" else data

    monkeypatch.setattr(Path, "read_bytes", changed)
    assert est._method_digest() != before


@pytest.mark.unit
def test_an_estimate_of_a_task_with_configs_says_which_config_it_priced():
    """estimate --size full on rw_fp8_matmul prices prefill, its first config: said, with the decode size to ask."""
    got = est._one_config(est.Estimate(ok=True, chip="v5e", size="full", summary="TPU estimate."),
                          load_task("rw_fp8_matmul"), "full")
    assert "config prefill only (the task's first of 2)" in got.summary and "--size full@decode" in got.limits[-1]
    one = est._one_config(est.Estimate(ok=True, chip="v5e", size="full@decode", summary="TPU estimate."),
                          load_task("rw_fp8_matmul"), "full@decode")
    assert one.summary == "TPU estimate." and not one.limits
