"""Usage errors: exit 2, exactly one line on stderr, nothing on stdout, said before anything heavy starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from maxkernel.cli import main

ROOT = Path(__file__).resolve().parents[2]
KERNEL = str(ROOT / "tests/harness/kernels/gemm_tiled.py")

pytestmark = pytest.mark.unit


@pytest.fixture
def task_without_smoke(tmp_path):
    """A JAXBench-style folder that declares no sizes (a plain public task: only --size full)."""
    folder = tmp_path / "plain_task"
    folder.mkdir()
    (folder / "baseline.py").write_text("CONFIG = {}\ndef create_inputs(dtype=None):\n    return (1,)\n"
                                        "def workload(x):\n    return x\n")
    return str(folder)


CASES = {
    "unknown chip": (["compile", "--task", "8p_GEMM", "--kernel", KERNEL, "--chip", "v9"], "unknown chip 'v9'"),
    "unknown task": (["compile", "--task", "nosuch", "--kernel", KERNEL], "unknown task 'nosuch'"),
    "missing kernel": (["compile", "--task", "8p_GEMM", "--kernel", "missing.py"], "kernel file not found: missing.py"),
    "missing option": (["evaluate", "--task", "8p_GEMM"], "Missing option '--kernel'"),
    "bad size choice": (["test", "--task", "8p_GEMM", "--kernel", KERNEL, "--size", "huge"], "has no size 'huge' (has full, smoke)"),
    "bad seeds": (["evaluate", "--task", "8p_GEMM", "--kernel", KERNEL, "--seeds", "0"], "--seeds"),
    "profile chip": (["profile", "--task", "8p_GEMM", "--kernel", KERNEL, "--chip", "v9"], "unknown chip 'v9'"),
    "autotune chip": (["autotune", "--task", "8p_GEMM", "--kernel", KERNEL, "--chip", "tpu9"], "unknown chip 'tpu9'"),
    "bench run nothing": (["bench", "run"], "give --task TASK (repeatable) or --all"),
    "bench run both": (["bench", "run", "--all", "--task", "8p_GEMM"], "give --task TASK (repeatable) or --all"),
    "bench run task": (["bench", "run", "--task", "nosuch"], "unknown task 'nosuch'"),
    "bench agent both": (["bench", "agent", "--all", "--tasks", "8p_GEMM"], "not both"),
    "bench agent nothing": (["bench", "agent"], "give --tasks"),
    "search no task": (["search"], "--task is required"),
    "search status": (["search", "status", "/nonexistent/search"], "no search in /nonexistent/search"),
    "report": (["report", "/nonexistent/results"], "results folder not found"),
    "optimize task": (["optimize", "--task", "nosuch"], "unknown task 'nosuch'"),
    "unknown command": (["frobnicate"], "No such command 'frobnicate'"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_usage_error_is_one_line_exit_2(name, capsys):
    argv, needle = CASES[name]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("maxkernel: error: "), err
    assert needle in err


def test_size_a_task_does_not_declare(task_without_smoke, capsys):
    assert main(["test", "--task", task_without_smoke, "--kernel", KERNEL]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "maxkernel: error: task plain_task has no size 'smoke' (has full)\n"


def test_a_task_whose_baseline_does_not_load_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "baseline.py").write_text("SIZES = dict(smoke={})\nraise RuntimeError('broken task')\n")
    assert main(["test", "--task", str(tmp_path), "--kernel", KERNEL]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "baseline.py does not load (RuntimeError: broken task)" in err


def test_chip_is_checked_before_task_and_kernel(capsys):
    """Cheapest first: with everything wrong, the chip is what is reported (no task lookup, no file check)."""
    assert main(["compile", "--task", "nosuch", "--kernel", "missing.py", "--chip", "v9"]) == 2
    assert "unknown chip" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["compile", "--task", "8p_GEMM", "--kernel", KERNEL, "--chip", "v9"],
    ["compile", "--task", "nosuch", "--kernel", KERNEL],
    ["compile", "--task", "8p_GEMM", "--kernel", "missing.py"],
    ["evaluate", "--task", "12p_RMSNorm", "--kernel", KERNEL, "--size", "smoke", "--seeds", "0"],
])
def test_preflight_fails_before_jax_is_imported(argv):
    """What makes these errors instant (benchmarks/cli_preflight.py has the times): the process never
    imports jax, starts no sandbox and prints nothing but the error."""
    code = ("import sys, json; from maxkernel.cli import main; rc = main(json.loads(sys.argv[1])); "
            "sys.stdout.write(json.dumps([rc, 'jax' in sys.modules]))")
    r = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert json.loads(r.stdout) == [2, False]
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("maxkernel: error: ")


def test_internal_error_is_one_line_exit_1(monkeypatch, capsys):
    import maxkernel.bench

    def broken(*_args):
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(maxkernel.bench, "list_tasks", broken)
    assert main(["bench", "list", "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == "maxkernel: internal error: RuntimeError: disk on fire second line\n"


def test_help_and_version_exit_0(capsys):
    assert main(["--help"]) == 0
    assert "evaluate" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert "maxkernel, version" in capsys.readouterr().out
    assert main(["compile", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--chip" in text and "--task" in text and "--json" in text
