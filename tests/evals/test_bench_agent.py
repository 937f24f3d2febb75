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


@pytest.mark.slow
@pytest.mark.integration
def test_bench_agent_records_resumes_and_reports(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("MAXKERNEL_") and k not in _KEEP] + list(_CREDENTIALS):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MAXKERNEL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("MAXKERNEL_MAX_ITERATIONS", "1")
    get_settings.cache_clear()
    try:
        out = tmp_path / "bench"
        lines = []
        doc = run_bench_agent(["12p_RMSNorm"], model="replay", out=out, concurrency=2, progress=lines.append)
        assert doc["ran"] == ["12p_RMSNorm"] and doc["resumed"] == []
        rec = json.loads((out / "records" / "12p_RMSNorm.json").read_text())
        assert rec == doc["tasks"][0] and rec["finished"] and rec["correct"] and rec["failure"] is None
        assert rec["judged"] == "answer" and rec["agent_status"] == "correct" and rec["replay"] is True
        assert len(rec["seeds"]) == len(heldout_seeds()) and rec["verdict"]["correctness"]["seeds"] == rec["seeds"]
        assert rec["verdict"]["correctness"]["seeds_drawn"] == "fresh"
        assert rec["speedup"] > 0 and rec["speedup_low"] <= rec["speedup"] <= rec["speedup_high"]
        assert rec["reference_speedup"] > 0 and rec["speedup_vs_reference"] > 0 and rec["roofline_fraction"] > 0
        assert rec["backend"] == "cpu" and "cpu_timing" in rec["flags"]
        assert rec["iterations"] == 1 and rec["llm_calls"] > 0 and rec["tokens"] > 0 and rec["cost_usd"] == 0.0
        assert rec["wall_s"] > 0 and (out / "kernels" / "12p_RMSNorm" / "kernel.py").is_file()
        assert any(line.startswith("[12p_RMSNorm] done: CORRECT") for line in lines)
        assert doc["summary"]["fast_0"] == 1.0 and doc["summary"]["geomean_speedup"] == pytest.approx(rec["speedup"])

        again = run_bench_agent(["12p_RMSNorm"], model="replay", out=out)
        assert again["ran"] == [] and again["tasks"] == [rec]  # a finished record is not redone

        report = render_report(out)
        md = Path(report["markdown"]).read_text()
        assert CPU_WARNING in md and REPLAY_WARNING in md and "| p | 1 | 1 | 100% (1/1) |" in md
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
