"""The command line as scripts use it: --json documents on stdout, exit codes 0 / 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def mk(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "maxkernel.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def test_bench_list_json_lists_all_50_tasks():
    r = mk("bench", "list", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 50 and {"name", "tier", "source"} <= set(rows[0])
    assert {x["tier"] for x in rows} == {"p", "k"}
    assert sum(x["tier"] == "p" for x in rows) == 17


@pytest.mark.parametrize("args,needle", [
    (["evaluate", "--task", "no_such_task", "--kernel", "x.py"], "unknown task"),
    (["evaluate", "--task", "8p_GEMM", "--kernel", "/nonexistent.py"], "kernel file not found"),
    (["compile", "--task", "8p_GEMM", "--kernel", "tests/harness/kernels/gemm_tiled.py", "--chip", "v9"], "unknown chip"),
    (["evaluate", "--task", "8p_GEMM"], "required"),
])
def test_usage_errors_exit_2_with_one_line(args, needle):
    r = mk(*args)
    assert r.returncode == 2
    assert needle in r.stderr
    assert r.stdout == ""


@pytest.mark.integration
def test_evaluate_json_is_one_document():
    r = mk("evaluate", "--task", "12p_RMSNorm", "--kernel", "tests/harness/kernels/rmsnorm_rows.py", "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["status"] == "correct" and v["correctness"]["seeds"] == [0, 1, 2]
    assert {"median_ms", "iqr_ms"} <= set(v["kernel"]) and v["speedup"] > 0 and "cpu_timing" in v["flags"]


@pytest.mark.integration
def test_bench_run_times_a_baseline_json():
    r = mk("bench", "run", "--task", "12p_RMSNorm", "--size", "smoke", "--reps", "5", "--json")
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["tasks"][0]
    assert t["median_ms"] > 0 and t["backend"] == "cpu" and "roofline_fraction" in t
