"""compile_pallas through the sandbox: every TPU chip the installed libtpu supports, and a clear failure."""

from pathlib import Path

import pytest

from maxkernel.tools.compile_pallas import TPU_CHIPS, compile_many, compile_pallas

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def test_reference_gemm_compiles_for_every_tpu_chip():
    results = compile_many("8p_GEMM", str(ROOT / "tests/harness/kernels/gemm_tiled.py"), list(TPU_CHIPS))
    assert [r.chip for r in results] == list(TPU_CHIPS)  # one result per chip: an empty list is no pass
    for r in results:
        assert r.ok, r.summary
        assert r.stage == "compile" and r.vmem_bytes and r.vmem_bytes < r.vmem_limit_bytes
        assert r.roofline_ms and r.roofline_ms > 0


def test_block_shape_violation_fails_with_hint():
    r = compile_pallas("8p_GEMM", str(ROOT / "tests/tools/kernels/bad_block_shape.py"), "v5e")
    assert not r.ok and r.hint and "FAILED" in r.summary


def test_unknown_chip_is_a_value_error():
    with pytest.raises(ValueError):
        compile_pallas("8p_GEMM", str(ROOT / "tests/harness/kernels/gemm_tiled.py"), "v9z")


def test_the_vmem_limit_said_is_the_one_the_kernel_asks_for():
    """A kernel that asks for its own scoped VMEM limit (the shipped GEMM sizes one from its tiles) is held to that
    limit: compile says so, instead of comparing its use with the chip's default ("44 MiB of 16 MiB scoped")."""
    own, default = compile_many("8p_GEMM", str(ROOT / "jaxbench/8p_GEMM/kernel.py"), ["v5e"])[0], \
        compile_many("8p_GEMM", str(ROOT / "tests/harness/kernels/gemm_tiled.py"), ["v5e"])[0]
    assert own.ok and own.vmem_limit_source == "kernel", own.summary
    assert own.vmem_bytes > 16 << 20 and own.vmem_bytes <= own.vmem_limit_bytes  # over the default, within its own
    assert f"of {own.vmem_limit_bytes >> 20} MiB scoped (the kernel asks for it)" in own.summary
    assert default.ok and default.vmem_limit_source == "chip" and default.vmem_limit_bytes == 16 << 20
    assert "of 16 MiB scoped (the chip default)" in default.summary


def test_compile_shows_what_the_source_says_beside_the_compiler(tmp_path):
    """A reduction axis marked parallel compiles (it races only on a two-TensorCore chip at run time): compile is
    where a person looks first, so the lint finding is in its answer, with the line; a correct kernel has none."""
    from maxkernel.evals.mistakes import MISTAKES, apply, base_source

    mistake = next(m for m in MISTAKES if m.family == "parallel_reduction")
    kernel = tmp_path / "kernel.py"
    kernel.write_text(apply(mistake, base_source(mistake)))
    r = compile_pallas("8p_GEMM", str(kernel), "v5e", "smoke")
    assert r.ok, r.summary
    assert [f["family"] for f in r.lint] == ["parallel_reduction"] and r.lint[0]["line"]
    assert f"Lint (parallel_reduction, line {r.lint[0]['line']}): " in r.summary and "'arbitrary'" in r.summary
    clean = compile_pallas("8p_GEMM", str(ROOT / "jaxbench/8p_GEMM/kernel.py"), "v5e", "smoke")
    assert clean.ok and clean.lint == [] and "Lint" not in clean.summary


def test_a_task_with_configs_is_compiled_at_each(tmp_path):
    """A kernel written for prefill alone (it refuses 16 rows) compiled "OK": only the task's first config was
    compiled. Each config is now, and the one that fails fails the compile."""
    src = (ROOT / "jaxbench/realworld/rw_w8a8_int8_matmul/kernel.py").read_text()
    guard = "    if m < 32:\n        raise ValueError('written for prefill only')\n    bs = BlockSizes.fit("
    kernel = tmp_path / "kernel.py"
    kernel.write_text(src.replace("    bs = BlockSizes.fit(", guard, 1))
    r = compile_pallas("rw_w8a8_int8_matmul", str(kernel), "v5e", "smoke")
    assert list(r.configs) == ["prefill", "decode"] and r.configs["decode"]["size"] == "smoke@decode"
    assert r.configs["prefill"]["ok"] and not r.configs["decode"]["ok"] and not r.ok
    assert "written for prefill only" in r.error and "decode: FAILED" in r.summary
    assert compile_pallas("rw_w8a8_int8_matmul", str(kernel), "v5e", "smoke@decode").configs == {}  # one named


def _kill_jobs(monkeypatch, times: int, sig=None) -> list:
    """Every compile job, up to `times`, SIGKILLed from outside as it is handed its files (as the machine's
    out-of-memory killer would); returns the list of pids killed."""
    import os
    import signal

    from maxkernel.harness.sandbox.pool import WorkerPool

    real_run, kills = WorkerPool.run, []

    def run(self, job, files=None, timeout=None, on_start=None, refill=True):
        def kill_soon(worker):
            if len(kills) < times:
                kills.append(worker.proc.pid)
                os.killpg(worker.proc.pid, sig or signal.SIGKILL)
        return real_run(self, job, files, timeout, on_start=kill_soon, refill=refill)

    monkeypatch.setattr(WorkerPool, "run", run)
    return kills


def test_a_compile_killed_from_outside_is_run_again_and_says_so(monkeypatch):
    """The machine's out-of-memory killer takes the largest process, which a compile may be while its neighbours
    are busy (three of CI's compiles died so, mid-suite). Killed once from outside, the compile is run again and
    the result says the first died and how; a job killed every time is reported with its signal."""
    kills = _kill_jobs(monkeypatch, 1)
    [r] = compile_many("8p_GEMM", str(ROOT / "tests/harness/kernels/gemm_tiled.py"), ["v5e"])
    assert len(kills) == 1 and r.ok, r.summary
    assert "the first compile process died after" in r.summary and "killed by SIGKILL" in r.summary, r.summary

    monkeypatch.undo()
    kills = _kill_jobs(monkeypatch, 5)
    [r] = compile_many("8p_GEMM", str(ROOT / "tests/harness/kernels/gemm_tiled.py"), ["v5e"])
    assert len(kills) == 2 and not r.ok and r.stage == "sandbox", (kills, r.summary)
    assert "crashed after" in r.summary and "killed by SIGKILL (from outside the job" in r.summary, r.summary
    assert "twice in a row" in r.summary, r.summary

    # A job that dies of its own crash (a compiler that segfaults on this kernel) is not run again.
    import signal

    monkeypatch.undo()
    kills = _kill_jobs(monkeypatch, 5, signal.SIGSEGV)
    [r] = compile_many("8p_GEMM", str(ROOT / "tests/harness/kernels/gemm_tiled.py"), ["v5e"])
    assert len(kills) == 1 and not r.ok and "killed by SIGSEGV (the job's own crash)" in r.summary, r.summary
    assert "twice" not in r.summary and "run again" not in r.summary, r.summary
