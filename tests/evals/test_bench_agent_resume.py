"""Resuming `bench agent`: a task that ended in agent_error runs again; any other finished record stands."""

import json

import pytest

from maxkernel import bench_agent

pytestmark = pytest.mark.unit


def test_agent_error_records_are_retried_on_resume(tmp_path, monkeypatch):
    out = tmp_path / "bench"
    (out / "records").mkdir(parents=True)
    crashed = {"task": "12p_RMSNorm", "finished": True, "correct": False, "failure": "agent_error",
               "status": "agent_error", "reason": "ModelCallError: gave up", "wall_s": 1.0}
    kept = {"task": "8p_GEMM", "finished": True, "correct": False, "failure": "incorrect", "wall_s": 1.0}
    for rec in (crashed, kept):
        (out / "records" / f"{rec['task']}.json").write_text(json.dumps(rec))
    ran = []

    def record(task, *_args):  # the agent itself is not what this tests: the bookkeeping around it is
        ran.append(task)
        return {"task": task, "finished": True, "correct": True, "failure": None, "wall_s": 2.0}

    monkeypatch.setattr(bench_agent, "_record", record)
    monkeypatch.setattr(bench_agent, "_check", lambda *_a: {})
    lines = []
    doc = bench_agent.run_bench_agent(["8p_GEMM", "12p_RMSNorm"], model="replay", out=out, progress=lines.append)
    assert ran == ["12p_RMSNorm"] and doc["ran"] == ["12p_RMSNorm"]
    assert "retrying 1 that ended in agent_error: 12p_RMSNorm" in lines[0]
    by_task = {r["task"]: r for r in doc["tasks"]}
    assert by_task["12p_RMSNorm"]["correct"] and by_task["8p_GEMM"]["failure"] == "incorrect"
