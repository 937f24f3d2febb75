"""The command line as scripts use it, through the real entry point: one --json document on stdout, exit 0."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def mk(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "maxkernel.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


@pytest.mark.integration
def test_console_script_and_module_agree():
    script = shutil.which("maxkernel")
    assert script, "the maxkernel console script is not installed"
    a = subprocess.run([script, "bench", "list", "--json"], capture_output=True, text=True, timeout=120)
    b = mk("bench", "list", "--json")
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    assert json.loads(a.stdout) == json.loads(b.stdout) and len(json.loads(a.stdout)) == 50


@pytest.mark.integration
def test_evaluate_json_is_one_document():
    r = mk("evaluate", "--task", "12p_RMSNorm", "--kernel", "tests/harness/kernels/rmsnorm_rows.py", "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["status"] == "correct" and len(v["correctness"]["seeds"]) == 3
    assert v["correctness"]["seeds_drawn"] == "fresh"
    assert {"median_ms", "iqr_ms"} <= set(v["kernel"]) and v["speedup"] > 0 and "cpu_timing" in v["flags"]
    assert "evaluating" in r.stderr  # progress on stderr, never in the document


@pytest.mark.integration
def test_bench_run_times_a_baseline_json():
    r = mk("bench", "run", "--task", "12p_RMSNorm", "--size", "smoke", "--reps", "5", "--json")
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["tasks"][0]
    assert t["median_ms"] > 0 and t["backend"] == "cpu" and "roofline_fraction" in t
    assert "[1/1] 12p_RMSNorm (smoke)" in r.stderr
