"""Exit codes scripts can branch on: 0 the good answer, 1 the command worked and the answer is bad (the same output
printed first), 2 a usage error; and --chip, the same option wherever a command judges or estimates for a chip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from maxkernel.cli import main
from maxkernel.settings import get_settings

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "jaxbench" / "12p_RMSNorm" / "kernel.py"
RMS = ["--task", "12p_RMSNorm", "--kernel", str(SHIPPED)]
# No TPU estimate on a verdict: it would add a profiled compile to every evaluation and judges nothing here.
NO_ESTIMATE = {"MAXKERNEL_ESTIMATE": "false"}


def mk(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "maxkernel.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env={**os.environ, **(env or {})})


def variant(tmp_path: Path, name: str, old: str, new: str) -> str:
    """A copy of the shipped RMSNorm kernel with one line changed."""
    source = SHIPPED.read_text()
    assert source.count(old) == 1, old
    path = tmp_path / f"{name}.py"
    path.write_text(source.replace(old, new))
    return str(path)


def wrong(tmp_path):  # runs, compiles, and doubles every output: incorrect
    return variant(tmp_path, "wrong", "(normed * scale_ref[...].astype(jnp.float32))",
                   "(normed * scale_ref[...].astype(jnp.float32) * 2)")


def vmem_oom(tmp_path):  # 256-row blocks overflow v5e's 16 MiB scoped VMEM at full size: Mosaic refuses it (E1001)
    return variant(tmp_path, "vmem_oom", "block_rows: int = 128,", "block_rows: int = 256,")


def untileable(tmp_path):  # 12 rows tile no row count of the task: the kernel's own ValueError when traced
    return variant(tmp_path, "untileable", "block_rows: int = 128,", "block_rows: int = 12,")


@pytest.fixture
def keep_chip(monkeypatch):
    """--chip sets the process's settings chip (as the harness reads it): put it back after an in-process run."""
    monkeypatch.setattr(get_settings(), "chip", get_settings().chip)


# -- the real thing: sandboxed jobs, libtpu compiles -----------------------------------------------------------
@pytest.mark.integration
def test_evaluate_of_an_incorrect_kernel_exits_1_with_its_json_unchanged(tmp_path):
    from maxkernel.harness.verdict.result import Verdict

    r = mk("evaluate", "--task", "12p_RMSNorm", "--kernel", wrong(tmp_path), "--json", env=NO_ESTIMATE)
    assert r.returncode == 1, r.stderr[-3000:]
    doc = json.loads(r.stdout)  # still exactly one document on stdout: the verdict, as with exit 0
    assert doc["status"] == "incorrect" and doc["correctness"]["max_rel_err"] > doc["correctness"]["tolerance"]
    assert set(doc) == set(Verdict.model_fields) and Verdict.model_validate(doc).status == "incorrect"
    assert "maxkernel: error" not in r.stderr and "internal error" not in r.stderr


@pytest.mark.integration
def test_evaluate_of_a_correct_kernel_exits_0_and_takes_a_chip():
    r = mk("evaluate", *RMS, "--chip", "v6e", "--json", env=NO_ESTIMATE)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["status"] == "correct"


@pytest.mark.integration
def test_compile_of_a_kernel_that_does_not_compile_exits_1(tmp_path):
    r = mk("compile", "--task", "12p_RMSNorm", "--kernel", vmem_oom(tmp_path), "--chip", "v5e", "--json")
    assert r.returncode == 1, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["stage"] == "compile" and "E1001" in doc["error"] and doc["chip"] == "v5e"


@pytest.mark.integration
def test_estimate_that_cannot_estimate_exits_1(tmp_path):
    r = mk("estimate", "--task", "12p_RMSNorm", "--kernel", untileable(tmp_path), "--size", "smoke", "--json")
    assert r.returncode == 1, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["estimated_ms"] is None and "does not divide" in doc["error"]


@pytest.mark.integration
def test_test_of_an_incorrect_kernel_exits_1(tmp_path):
    r = mk("test", "--task", "12p_RMSNorm", "--kernel", wrong(tmp_path), "--seeds", "1", "--json")
    assert r.returncode == 1, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["status"] == "incorrect" and doc["mismatch"]


# -- the mapping from answer to exit code, in process (the tools replaced by fakes) ----------------------------
def _verdict(status: str):
    from maxkernel.harness.verdict.result import Verdict

    return Verdict(task="12p_RMSNorm", kernel_file=str(SHIPPED), size="smoke", status=status, reason=f"{status} (fake)")


@pytest.mark.unit
@pytest.mark.parametrize("status, code", [("correct", 0), ("incorrect", 1), ("rejected", 1), ("error", 1),
                                          ("timeout", 1), ("unverifiable_on_cpu", 1)])
def test_evaluate_exits_0_only_on_a_correct_verdict(status, code, monkeypatch, keep_chip, capsys):
    import maxkernel.harness.verdict.evaluate as harness

    seen = {}

    def fake(task, kernel, **kw):
        seen["chip"] = get_settings().chip  # what the evaluator would read
        return _verdict(status)

    monkeypatch.setattr(harness, "evaluate", fake)
    assert main(["evaluate", *RMS, "--chip", "v6e", "--json"]) == code
    out, err = capsys.readouterr()
    assert json.loads(out) == json.loads(json.dumps(_verdict(status).model_dump(), default=str))
    assert seen["chip"] == "v6e" and "maxkernel: " not in err


@pytest.mark.unit
def test_evaluate_says_when_pallas_work_sits_behind_data_dependent_branches(monkeypatch, keep_chip, capsys):
    """Met writing 5p and 15p: "0% of FLOPs inside Pallas" printed beside CORRECT for a kernel whose work runs behind
    data-dependent pl.when branches (the census counts them at their lightest)."""
    import maxkernel.harness.verdict.evaluate as harness

    v = _verdict("correct").model_copy(update={"integrity": {"pallas_share": 0.0, "pallas_share_max": 1.0,
                                                             "pallas_calls": 1}})
    monkeypatch.setattr(harness, "evaluate", lambda *a, **k: v)
    assert main(["evaluate", *RMS]) == 0
    assert "0% of FLOPs inside Pallas surely, 100% where its data-dependent branches run" in capsys.readouterr().out
    v.integrity["pallas_share_max"] = 0.0
    assert main(["evaluate", *RMS]) == 0
    assert "0% of FLOPs inside Pallas (1 pallas_call)" in capsys.readouterr().out


def _tool_results(ok: bool) -> dict:
    from maxkernel.harness.estimate.estimator import Estimate
    from maxkernel.tools.autotune import TuneResult
    from maxkernel.tools.compile_pallas import CompileResult
    from maxkernel.tools.run_tests import TestReport
    from maxkernel.tools.xprof_capture import ProfileResult

    word = "fine" if ok else "bad"
    results = {
        "compile": ("maxkernel.tools.compile_pallas", "compile_pallas",
                    CompileResult(ok=ok, summary=word, chip="v5e", stage="compile")),
        "test": ("maxkernel.tools.run_tests", "run_tests",
                 TestReport(ok=ok, summary=word, status="correct" if ok else "incorrect")),
        "profile": ("maxkernel.tools.xprof_capture", "xprof_capture", ProfileResult(ok=ok, summary=word)),
        "autotune": ("maxkernel.tools.autotune", "autotune", TuneResult(ok=ok, summary=word)),
    }
    if not ok:  # an estimate that is there prints its floors and fit: the real test above covers the bad one
        results["estimate"] = ("maxkernel.tools.estimate_tpu", "estimate_tpu_time",
                               Estimate(ok=False, chip="v5e", size="full", stage="compile", summary="Not estimated"))
    return results


@pytest.mark.unit
@pytest.mark.parametrize("ok", [True, False])
def test_each_kernel_tool_exits_by_its_answer(ok, monkeypatch, keep_chip, capsys):
    import importlib

    for command, (module, name, result) in _tool_results(ok).items():
        monkeypatch.setattr(importlib.import_module(module), name, lambda *a, _r=result, **kw: _r)
        assert main([command, *RMS, "--json"]) == (0 if ok else 1), command
        doc = json.loads(capsys.readouterr().out)  # the same one document either way
        assert doc["ok"] is ok and doc["summary"] == result.summary, command


def _optimize_doc(status: str) -> dict:
    return {"status": status, "stop_reason": "fake", "kernel": None, "verdict": None, "iterations": 1, "llm_calls": 0,
            "tokens": 0, "cost_usd": 0.0, "replay": True, "model": "replay", "faults": [], "failed_steps": 0,
            "session_id": "s"}


@pytest.mark.unit
@pytest.mark.parametrize("status, code", [("correct", 0), ("failed", 1), ("failed_heldout", 1), ("unfinished", 1)])
def test_optimize_exits_0_only_when_it_ends_with_a_correct_kernel(status, code, monkeypatch, keep_chip, capsys):
    import maxkernel.optimize

    seen = {}

    def fake(task, **kw):
        seen["chip"] = get_settings().chip  # what the loop's session setup reads
        return _optimize_doc(status)

    monkeypatch.setattr(maxkernel.optimize, "run_optimize", fake)
    assert main(["optimize", "--task", "12p_RMSNorm", "--model", "replay", "--chip", "7x", "--json"]) == code
    assert json.loads(capsys.readouterr().out) == _optimize_doc(status) and seen["chip"] == "7x"


def _bench_doc(failures: list[str | None]) -> dict:
    from maxkernel.evals.stats import FAST_P, fast_key

    tasks = [{"task": f"t{i}", "correct": f is None, "failure": f, "speedup": 1.0 if f is None else None}
             for i, f in enumerate(failures)]
    summary = {"tasks": len(tasks), "correct": sum(t["correct"] for t in tasks), "geomean_speedup": None,
               "cpu_timing": True, "by_suite": {}, **{fast_key(p): 0.0 for p in FAST_P}}
    return {"tasks": tasks, "summary": summary, "skipped": [], "out": "runs/fake"}


@pytest.mark.unit
@pytest.mark.parametrize("failures, code", [([None, "incorrect", "no_kernel"], 0), ([None, "agent_error"], 1)])
def test_bench_agent_exits_1_only_when_a_task_did_not_finish(failures, code, monkeypatch, keep_chip, capsys):
    import maxkernel.bench_agent

    seen = {}

    def fake(names, **kw):
        seen["chip"] = get_settings().chip
        return _bench_doc(failures)

    monkeypatch.setattr(maxkernel.bench_agent, "run_bench_agent", fake)
    assert main(["bench", "agent", "--tasks", "12p_RMSNorm", "--model", "replay", "--chip", "v5p", "--json"]) == code
    assert json.loads(capsys.readouterr().out) == _bench_doc(failures) and seen["chip"] == "v5p"


@pytest.mark.unit
def test_bench_run_exits_1_when_a_task_could_not_be_timed(monkeypatch, capsys):
    import maxkernel.bench

    def fake(task, size, **kw):
        if task.name == "8p_GEMM":
            raise RuntimeError("no memory")
        return {"name": task.name, "size": size, "median_ms": 1.0, "iqr_ms": 0.1, "backend": "cpu"}

    monkeypatch.setattr(maxkernel.bench, "time_task", fake)
    assert main(["bench", "run", "--task", "12p_RMSNorm", "--json"]) == 0
    capsys.readouterr()
    assert main(["bench", "run", "--task", "12p_RMSNorm", "--task", "8p_GEMM", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)["tasks"]
    assert rows[0]["median_ms"] == 1.0 and "no memory" in rows[1]["error"]  # the other task's figures are kept


# -- --chip: one option, the chips that can work --------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("argv", [
    ["compile", *RMS, "--chip", "cpu"],
    ["estimate", *RMS, "--chip", "cpu"],
    ["evaluate", *RMS, "--chip", "cpu"],
    ["autotune", *RMS, "--chip", "cpu"],
    ["profile", *RMS, "--chip", "cpu"],
    ["optimize", "--task", "12p_RMSNorm", "--chip", "cpu"],
    ["bench", "agent", "--tasks", "12p_RMSNorm", "--chip", "cpu"],
])
def test_chip_cpu_is_a_usage_error_naming_the_valid_chips(argv, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("maxkernel: error: --chip cpu: "), err
    assert "v5e" in err and "cpu" not in err.split("valid chips:")[-1]


@pytest.mark.unit
def test_compile_chip_cpu_is_refused_before_jax_is_imported():
    code = ("import sys, json; from maxkernel.cli import main; rc = main(json.loads(sys.argv[1])); "
            "sys.stdout.write(json.dumps([rc, 'jax' in sys.modules]))")
    argv = ["compile", *RMS, "--chip", "cpu"]
    r = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert json.loads(r.stdout) == [2, False], r.stderr
    assert "valid chips: v4, v5e, v5p, v6e, 7x, h100, h200, native" in r.stderr


@pytest.mark.unit
@pytest.mark.parametrize("argv, needle", [
    (["evaluate", *RMS, "--chip", "native"], "unknown chip 'native'"),  # a verdict is for a named chip
    (["estimate", *RMS, "--chip", "h200"], "TPU estimates need a TPU chip"),
    (["optimize", "--task", "12p_RMSNorm", "--chip", "v9"], "unknown chip 'v9'"),
])
def test_chips_a_command_cannot_use_are_usage_errors(argv, needle, capsys):
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.unit
def test_the_settings_chip_is_the_default_and_checked_like_the_option(monkeypatch, capsys):
    monkeypatch.setattr(get_settings(), "chip", "cpu")
    assert main(["compile", *RMS]) == 2
    assert "MAXKERNEL_CHIP cpu: the CPU is not a target chip" in capsys.readouterr().err


@pytest.mark.unit
@pytest.mark.parametrize("command", [["evaluate"], ["compile"], ["estimate"], ["autotune"], ["profile"], ["optimize"],
                                     ["bench", "agent"]])
def test_every_judging_command_offers_chip(command, capsys):
    assert main([*command, "--help"]) == 0
    text = capsys.readouterr().out
    assert "--chip CHIP" in text and "v5e" in text


@pytest.mark.integration
def test_set_reaches_the_job_a_kernel_command_runs(tmp_path, capsys):
    """Through the command line: a tile that does not divide the smoke size's M, set with --set, is what the
    compile job refuses (the value reached the program the job compiled)."""
    import jaxbench

    kernel = str(Path(jaxbench.__file__).parent / "8p_GEMM" / "kernel.py")
    args = ["compile", "--task", "8p_GEMM", "--kernel", kernel, "--size", "smoke", "--chip", "v5e", "--json"]
    assert main(args + ["--set", "block_m=12"]) == 1
    out = capsys.readouterr()
    assert "block_m=12" in out.err and "block for M=256 is 12" in out.out, out.out[-2000:]

