"""The port and the Pallas optimisation chained in one command (`maxkernel port ... --optimize`): the porter's
recorded rounds (the first port is wrong and goes back with where it differs), the harness's equivalence check, the
task folder the harness judges, then the autonomous loop on it, both verdicts reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _extras import need_module

SOURCES = Path(__file__).parent / "port" / "sources"
KERNELS = Path(__file__).parents[1] / "maxkernel" / "agents" / "replay" / "kernels"
RMSNORM = ["--arg", "bf16[T=4096,H=2048]", "--init", "dim=H"]


def _run(tmp_path: Path, *args, timeout=900):
    env = dict(os.environ, JAX_PLATFORMS="cpu", MAXKERNEL_DATA_DIR=str(tmp_path / "data"), MAXKERNEL_MAX_ITERATIONS="1")
    return subprocess.run([sys.executable, "-m", "maxkernel.cli", "port", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path, env=env)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)  # the port's two rounds and checks, the task build, then the whole loop: ~170 s alone
def test_port_then_optimize_reports_both_verdicts(tmp_path):
    need_module("torch", extra="port")
    out = tmp_path / "port_rmsnorm_module"
    r = _run(tmp_path, "--from", f"{SOURCES / 'rmsnorm_module.py'}:RMSNorm", *RMSNORM, "--model",
             "replay", "--out", str(out), "--optimize", "--seeds", "2", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["equivalent"] and doc["task"]["ok"] and doc["agent"]
    assert len(doc["port"]["seeds"]) == 2  # --seeds reaches the harness's check in the agent path too
    # The recorded first port is wrong; the harness's check sent it back with where it differs.
    assert doc["port"]["rounds"] == 2
    assert "Harness check, round 1: NOT EQUIVALENT" in r.stderr and "worst at" in r.stderr
    record = json.loads((out / "port" / "equivalence.json").read_text())
    assert record["report"]["equivalent"] and record["spec"]["name"] == doc["name"]
    assert doc["optimize"]["status"] == "correct" and doc["optimize"]["verdict"]["status"] == "correct"
    # The optimised kernel lands in the task folder, and the summary says its path, verdict and TPU estimate.
    kernel = (out / "kernel.py").resolve()
    assert doc["optimize"]["kernel"] == str(kernel) and kernel.is_file() and (out / "verdict.json").is_file()
    assert "EQUIVALENT" in doc["summary"], doc["summary"]
    assert f"Pallas kernel: returned kernel {kernel}: held-out verdict CORRECT; " in doc["summary"], doc["summary"]
    assert "TPU estimate on v5e" in doc["summary"] or "no TPU estimate" in doc["summary"], doc["summary"]
    # The task folder is a task the harness judges: a Pallas kernel for it is correct, a wrong one is not.
    from maxkernel.harness.verdict.evaluate import evaluate

    good = evaluate(str(out), KERNELS / "port_rmsnorm_module_pallas.py", size="smoke", estimate=False)
    assert good.status == "correct", good.reason
    bad = tmp_path / "bad.py"
    bad.write_text((KERNELS / "port_rmsnorm_module_pallas.py").read_text().replace("* w_ref[...]", "* (1 + w_ref[...])"))
    assert evaluate(str(out), bad, size="smoke", estimate=False).status == "incorrect"


@pytest.mark.integration
def test_an_optimize_the_replay_model_cannot_run_is_refused_before_the_port(tmp_path):
    """The replay model has no recording for a folder named `rms`: the command says so (with what the replay
    model can do and the settings for a real one) before any port work, and makes no folder."""
    need_module("torch", extra="port")
    port = Path(__file__).parents[1] / "maxkernel" / "agents" / "replay" / "kernels" / "port_rmsnorm_module_v2.py"
    out = tmp_path / "rms"
    r = _run(tmp_path, "--from", f"{SOURCES / 'rmsnorm_module.py'}:RMSNorm", *RMSNORM, "--jax", f"{port}:rmsnorm",
             "--seeds", "1", "--model", "replay", "--out", str(out), "--optimize", "--json", timeout=120)
    assert r.returncode == 2 and r.stdout == "", r.stderr[-2000:]
    *before, error = r.stderr.strip().splitlines()
    assert error.startswith("maxkernel: error: ") and "no recording for rms" in error and "GOOGLE_API_KEY" in error
    assert len(before) <= 1 and not out.exists(), r.stderr  # at most the line naming the port; no check ran
