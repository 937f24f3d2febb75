"""TPU estimates from libtpu's static profile: GEMM tilings rank as the reference table does, nothing lands below its
roofline floor (whatever the kernel declares), a compile failure is an error and no estimate, the cache answers a
second call, and a profile that runs out of time is 'could not estimate', never a crash."""

from pathlib import Path

import pytest
from _extras import need_module

from maxkernel import chips
from maxkernel.harness.estimate.estimator import estimate, estimate_program
from maxkernel.tasks import load_task

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SUITE = Path(__file__).parents[1] / "jaxbench"
GEMM = SUITE / "8p_GEMM" / "kernel.py"
V5E = chips.get("v5e")
TILINGS = [(128, 128, 128), (256, 256, 256), (512, 1024, 1024)]
REFERENCE_MS = {(128, 128, 128): 459.0, (256, 256, 256): 74.0, (512, 1024, 1024): 20.6}  # tpu-estimate.md


@pytest.fixture(scope="module")
def gemm_estimates():
    need_module("libtpu", extra="tpu")
    task = load_task("8p_GEMM")
    return {t: estimate_program(task, str(GEMM), V5E, "full", dict(zip(("block_m", "block_n", "block_k"), t)))
            for t in TILINGS}


def test_three_gemm_tilings_rank_as_the_reference_does(gemm_estimates):
    ms = [gemm_estimates[t].estimated_ms for t in TILINGS]
    assert all(gemm_estimates[t].ok for t in TILINGS), [gemm_estimates[t].error for t in TILINGS]
    assert ms[0] > ms[1] > ms[2], ms
    for t in TILINGS:
        assert abs(gemm_estimates[t].estimated_ms / REFERENCE_MS[t] - 1) < 0.15, (t, gemm_estimates[t].estimated_ms)
    assert gemm_estimates[(128, 128, 128)].bound == "overhead"  # 4 % of peak: small tiles, not the roofline
    assert gemm_estimates[(512, 1024, 1024)].bound == "compute"


def test_no_estimate_is_below_its_roofline_floor(gemm_estimates):
    flops = 2 * 8192 * 8192 * 28672
    for t, e in gemm_estimates.items():
        assert e.floors["compute_ms"] == pytest.approx(flops / V5E.device_peak_flops * 1e3)
        assert e.estimated_ms >= max(e.floors.values())
        assert e.fraction_of_roofline <= 1.0


def test_a_kernel_that_understates_its_cost_does_not_lower_its_floor(gemm_estimates, tmp_path):
    honest = gemm_estimates[(512, 1024, 1024)]
    source = GEMM.read_text()
    start = source.index("    cost = pl.CostEstimate(")
    end = source.index("    return pl.pallas_call(")
    liar = tmp_path / "liar.py"
    liar.write_text(source[:start] + "    cost = pl.CostEstimate(flops=1, transcendentals=0, bytes_accessed=1)\n"
                    + source[end:])
    e = estimate_program(load_task("8p_GEMM"), str(liar), V5E, "full", None)
    assert e.ok, e.error
    assert e.floors == honest.floors  # FLOPs are the task's, bytes the BlockSpecs': the kernel's say-so is not used
    assert e.estimated_ms >= max(e.floors.values())
    assert any("cost_estimate declares" in x for x in e.limits)


def default_vmem(tmp_path) -> Path:
    """The shipped GEMM asking for no scoped VMEM limit of its own: v5e's 16 MiB default then holds."""
    source = GEMM.read_text()
    asked = ",\n                                             vmem_limit_bytes=_vmem_limit(bs, a.dtype, out_dtype))"
    assert source.count(asked) == 1
    kernel = tmp_path / "gemm_default_vmem.py"
    kernel.write_text(source.replace(asked, ")"))
    return kernel


def test_a_vmem_overflow_is_the_compilers_error_and_no_estimate(tmp_path):
    need_module("libtpu", extra="tpu")
    r = estimate("8p_GEMM", str(default_vmem(tmp_path)), "v5e",
                 tunables={"block_m": 1024, "block_n": 1024, "block_k": 1024})
    assert not r.ok and r.estimated_ms is None and r.speedup_estimate is None
    assert r.stage == "compile" and "vmem" in r.error.lower()
    assert r.hint and "VMEM" in r.hint
    assert r.error in r.summary and "could not estimate" in r.summary


def test_a_second_call_is_answered_from_the_cache(gemm_estimates, monkeypatch):
    import maxkernel.harness.estimate.estimator as est

    first = gemm_estimates[(512, 1024, 1024)]
    assert not first.cached
    real_profile = est._profile
    monkeypatch.setattr(est, "_profile", lambda *a, **k: pytest.fail("a cache hit profiled the program again"))
    again = estimate_program(load_task("8p_GEMM"), str(GEMM), V5E, "full",
                             {"block_m": 512, "block_n": 1024, "block_k": 1024})
    assert again.cached  # the mechanism, not a wall-clock bound: no profiling job ran
    monkeypatch.setattr(est, "_profile", real_profile)
    assert again.estimated_ms == first.estimated_ms and again.fit == first.fit
    other_chip = estimate_program(load_task("8p_GEMM"), str(GEMM), chips.get("v6e"), "full",
                                  {"block_m": 512, "block_n": 1024, "block_k": 1024}, timeout=0.5)
    assert not other_chip.cached  # the key holds the chip (this one is cut short by its timeout)


def test_a_profile_out_of_time_is_could_not_estimate_and_not_cached():
    need_module("libtpu", extra="tpu")
    task = load_task("8p_GEMM")
    cfg = {"block_m": 256, "block_n": 512, "block_k": 512}
    r = estimate_program(task, str(GEMM), V5E, "full", cfg, timeout=0.5)
    assert not r.ok and r.stage == "timeout" and "MAXKERNEL_ESTIMATE_TIMEOUT_S" in r.hint
    assert not estimate_program(task, str(GEMM), V5E, "full", cfg, timeout=0.5).cached


def test_bad_input_is_an_answer_not_an_exception(tmp_path):
    assert estimate("no_such_task", str(GEMM), "v5e").stage == "input"
    assert "TPU chips" in estimate("8p_GEMM", str(GEMM), "h100").error
    assert "not found" in estimate("8p_GEMM", str(tmp_path / "missing.py"), "v5e").error
    bad = tmp_path / "evil.py"
    bad.write_text("import os\nos.system('true')\ndef workload(a, b):\n    return a @ b\n")
    r = estimate("8p_GEMM", str(bad), "v5e")
    assert not r.ok and r.stage == "static"
