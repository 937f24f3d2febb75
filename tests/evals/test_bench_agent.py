"""`bench agent` end to end with the replay model: a record per task, resume, and the report of the folder."""

import json
import os
from pathlib import Path

import pytest

from maxkernel.bench_agent import run_bench_agent
from maxkernel.evals.judging import heldout_seeds
from maxkernel.report import CPU_WARNING, REPLAY_WARNING, render_report
from maxkernel.settings import get_settings

# The suite's own switches pass through: its private cache, and estimates off (they are tested on their own).
_KEEP = ("MAXKERNEL_CACHE_DIR", "MAXKERNEL_ESTIMATE")

_CREDENTIALS = ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT")


def _bench_env(monkeypatch, data) -> None:
    for key in [k for k in os.environ if k.startswith("MAXKERNEL_") and k not in _KEEP] + list(_CREDENTIALS):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MAXKERNEL_DATA_DIR", str(data))
    monkeypatch.setenv("MAXKERNEL_MAX_ITERATIONS", "1")
    get_settings.cache_clear()


@pytest.fixture(scope="module")
def local_bench(tmp_path_factory):
    """Both tasks the replay model has recordings for, run on the local backend, two at once."""
    with pytest.MonkeyPatch.context() as mp:
        _bench_env(mp, tmp_path_factory.mktemp("data"))
        out = tmp_path_factory.mktemp("bench") / "local"
        lines = []
        try:
            doc = run_bench_agent(["12p_RMSNorm", "8p_GEMM"], model="replay", out=out, concurrency=2,
                                  progress=lines.append)
        finally:
            get_settings.cache_clear()
    return out, doc, lines


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)  # the module's two-task local run is paid by whichever test comes first
def test_bench_agent_records_resumes_and_reports(local_bench, tmp_path, monkeypatch):
    _bench_env(monkeypatch, tmp_path / "data")
    try:
        out, doc, lines = local_bench
        assert doc["ran"] == ["12p_RMSNorm", "8p_GEMM"] and doc["resumed"] == [] and doc["backend"] == "local"
        rec = json.loads((out / "records" / "12p_RMSNorm.json").read_text())
        assert rec == next(r for r in doc["tasks"] if r["task"] == "12p_RMSNorm") and rec["finished"] and rec["correct"] and rec["failure"] is None
        assert rec["ran_on"]["backend"] == "local" and rec["ran_on"]["pid"] == os.getpid()
        assert rec["judged"] == "answer" and rec["agent_status"] == "correct" and rec["replay"] is True
        assert len(rec["seeds"]) == len(heldout_seeds()) and rec["verdict"]["correctness"]["seeds"] == rec["seeds"]
        assert rec["verdict"]["correctness"]["seeds_drawn"] == "fresh"
        assert rec["speedup"] > 0 and rec["speedup_low"] <= rec["speedup"] <= rec["speedup_high"]
        assert rec["reference_speedup"] > 0 and rec["speedup_vs_reference"] > 0 and rec["roofline_fraction"] > 0
        assert rec["backend"] == "cpu" and "cpu_timing" in rec["flags"]
        assert rec["iterations"] == 1 and rec["llm_calls"] > 0 and rec["tokens"] > 0 and rec["cost_usd"] == 0.0
        assert rec["wall_s"] > 0 and (out / "kernels" / "12p_RMSNorm" / "kernel.py").is_file()
        assert any(line.startswith("[12p_RMSNorm] done: CORRECT") for line in lines)
        gemm = next(r for r in doc["tasks"] if r["task"] == "8p_GEMM")
        assert gemm["correct"] and doc["summary"]["fast_0"] == 1.0
        assert doc["summary"]["geomean_speedup"] == pytest.approx((rec["speedup"] * gemm["speedup"]) ** 0.5)

        again = run_bench_agent(["12p_RMSNorm"], model="replay", out=out)
        assert again["ran"] == [] and again["tasks"] == [rec]  # a finished record is not redone

        report = render_report(out)
        md = Path(report["markdown"]).read_text()
        assert CPU_WARNING in md and REPLAY_WARNING in md and "| p | 2 | 2 | 100% (2/2) |" in md
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


# What differs between two runs of the same task by design: fresh seeds, clocks, measured times, who ran it.
# Tokens too: the replay model counts the requests' text, which carries each run's own paths and measured figures.
_RUN_FIELDS = {"seeds", "wall_s", "started_at", "finished_at", "ran_on", "verdict", "session_id", "timing",
               "kernel", "max_rel_err", "reason", "roofline_fraction", "tokens"}


def _same_run(rec: dict) -> dict:
    """A record without what two runs of one task differ in: seeds, clocks, measured times and their ratios."""
    return {k: v for k, v in rec.items() if k not in _RUN_FIELDS and "speedup" not in k and not k.endswith("_ms")}


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_bench_agent_on_ray_makes_the_local_backends_records(local_bench, tmp_path, monkeypatch):
    """Each task a Ray task on a real local cluster: the same records (and the same resume) as the local backend,
    each saying which process made it."""
    from _extras import need_module

    need_module("ray", extra="ray")
    _bench_env(monkeypatch, tmp_path / "data")
    try:
        local_out, local, _ = local_bench
        out, lines = tmp_path / "ray", []
        doc = run_bench_agent(["12p_RMSNorm", "8p_GEMM"], model="replay", out=out, concurrency=2,
                              progress=lines.append, backend="ray")
        assert doc["backend"] == "ray" and doc["ran"] == ["12p_RMSNorm", "8p_GEMM"]
        ours = {r["task"]: r for r in doc["tasks"]}
        theirs = {r["task"]: r for r in local["tasks"]}
        assert set(ours) == set(theirs) == {"12p_RMSNorm", "8p_GEMM"}
        for task, rec in ours.items():
            assert set(rec) == set(theirs[task]), task
            assert _same_run(rec) == _same_run(theirs[task]), task
            assert rec["correct"] and rec["status"] == theirs[task]["status"] == "correct"
            assert rec["tokens"] > 0 and abs(rec["tokens"] - theirs[task]["tokens"]) <= 0.01 * theirs[task]["tokens"]
            assert rec["ran_on"]["backend"] == "ray" and rec["ran_on"]["pid"] != os.getpid() and rec["ran_on"]["node_id"]
            assert json.loads((out / "records" / f"{task}.json").read_text()) == rec  # written by the driver
        assert any(line == "[8p_GEMM] started (as a Ray task)" for line in lines)
        assert any(line.startswith("[12p_RMSNorm] done: CORRECT") for line in lines)
        again = run_bench_agent(["12p_RMSNorm", "8p_GEMM"], model="replay", out=out, backend="ray")
        assert again["ran"] == [] and again["tasks"] == doc["tasks"]  # resumed, no cluster started for nothing
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
