"""The report of a results folder: fast_p per tier, speedup statistics, failures, cost, plots, CPU warning."""

import json
from pathlib import Path

import pytest

from maxkernel.bench_agent import BenchError, load_records, run_bench_agent
from maxkernel.cli import main
from maxkernel.evals.stats import summarize
from maxkernel.report import CPU_WARNING, render_report

pytestmark = pytest.mark.unit


def record(task, tier, *, correct, speedup=None, failure=None, backend="cpu", cost=0.01, tokens=1000, **extra):
    return {"record_version": 1, "finished": True, "task": task, "tier": tier, "mode": "auto", "size": "smoke",
            "model": "gemini-3.5-flash", "replay": False, "correct": correct, "failure": failure,
            "status": "correct" if correct else (failure or "error"), "reason": "" if correct else f"{failure} here",
            "speedup": speedup, "speedup_low": speedup and speedup * 0.9, "speedup_high": speedup and speedup * 1.1,
            "speedup_vs_reference": speedup and speedup / 2, "roofline_fraction": speedup and speedup / 100,
            "backend": backend, "flags": ["cpu_timing"] if backend == "cpu" else [], "chip": "cpu",
            "seeds": [7919, 7920, 7921], "iterations": 2, "llm_calls": 10, "tokens": tokens, "cost_usd": cost,
            "wall_s": 30.0, **extra}


RECORDS = [
    record("1p_Flash_Attention", "p", correct=True, speedup=2.5),
    record("8p_GEMM", "p", correct=True, speedup=1.2),
    record("12p_RMSNorm", "p", correct=False, failure="incorrect"),
    record("41k_Something", "k", correct=True, speedup=0.5),
    record("50k_Other", "k", correct=False, failure="compile", cost=0.03),
]


def write(folder, records, *, torn=False):
    (folder / "records").mkdir(parents=True)
    for r in records:
        (folder / "records" / f"{r['task']}.json").write_text(json.dumps(r))
    if torn:  # an unfinished record (a task still running when the bench was stopped) is not reported
        (folder / "records" / "2p_Unfinished.json").write_text(json.dumps({"task": "2p_Unfinished"}))
    (folder / "meta.json").write_text(json.dumps({"mode": "auto", "model": "gemini-3.5-flash", "size": "smoke"}))
    return folder


def test_summary_follows_the_fields_definitions():
    s = summarize(RECORDS)
    assert s["tasks"] == 5 and s["correct"] == 3
    assert (s["fast_0"], s["fast_1"], s["fast_1.5"], s["fast_2"]) == (0.6, 0.4, 0.2, 0.2)
    assert s["geomean_speedup"] == pytest.approx((2.5 * 1.2 * 0.5) ** (1 / 3))
    assert s["median_speedup"] == 1.2
    assert s["by_tier"]["p"]["fast_1"] == pytest.approx(2 / 3) and s["by_tier"]["k"]["fast_1"] == 0.0
    assert s["failures"]["incorrect"] == 1 and s["failures"]["compile"] == 1 and s["failures"]["timeout"] == 0
    assert s["cost_usd"] == pytest.approx(0.07) and s["cost_usd_per_fast_kernel"] == pytest.approx(0.035)
    assert s["tokens_per_task"] == 1000 and s["cpu_timing"] is True
    unpriced = summarize(RECORDS[:1] + [record("8p_GEMM", "p", correct=True, speedup=1.1, cost=None)])
    assert unpriced["cost_usd"] is None and unpriced["tokens"] == 2000  # unknown cost is never a silent zero


def test_report_has_the_fast_p_table_plots_and_the_cpu_warning(tmp_path):
    folder = write(tmp_path / "results", RECORDS, torn=True)
    doc = render_report(folder)
    md = (folder / "report.md").read_text()
    html = (folder / "report.html").read_text()
    assert doc["markdown"] == str(folder / "report.md") and doc["html"] == str(folder / "report.html")
    assert "| tier | tasks | correct | fast_0 | fast_1 | fast_1.5 | fast_2 |" in md
    assert "| p | 3 | 2 | 67% (2/3) | 67% (2/3) | 33% (1/3) | 33% (1/3) |" in md
    assert "| all | 5 | 3 | 60% (3/5) | 40% (2/5) | 20% (1/5) | 20% (1/5) |" in md
    assert "2p_Unfinished" not in md
    # The CPU caveat comes first, before any number.
    assert md.index(CPU_WARNING) < md.index("fast_p") and CPU_WARNING in html
    for section in ("Failures", "| compile | 1 | 50k_Other |", "per correct-and-faster kernel (2)", "$0.0350"):
        assert section in md
    assert len(doc["plots"]) == 2
    for png in doc["plots"]:
        data = Path(png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        name = png.rsplit("/", 1)[1]
        assert f"]({name})" in md and f'src="{name}"' in html
    assert "<table>" in html and "<th>fast_1.5</th>" in html


def test_report_without_cpu_records_has_no_cpu_warning_and_honours_out(tmp_path):
    folder = write(tmp_path / "results", [record("8p_GEMM", "p", correct=True, speedup=1.3, backend="tpu")])
    doc = render_report(folder, tmp_path / "site" / "index.html")
    assert doc["html"] == str(tmp_path / "site" / "index.html") and doc["markdown"] == str(tmp_path / "site" / "index.md")
    assert CPU_WARNING not in (tmp_path / "site" / "index.md").read_text()
    assert (tmp_path / "site" / "index_speedup_per_task.png").is_file()


def test_report_command_exit_codes(tmp_path, capsys):
    folder = write(tmp_path / "results", RECORDS)
    assert main(["report", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["fast_1"] == 0.4
    for missing in (tmp_path / "nowhere", tmp_path):  # no folder; a folder without records
        assert main(["report", str(missing)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("maxkernel: error: ")


def test_bench_agent_does_not_redo_a_finished_record(tmp_path):
    done = record("12p_RMSNorm", "p", correct=True, speedup=0.01, model="replay")
    folder = write(tmp_path / "results", [done])
    doc = run_bench_agent(["12p_RMSNorm"], model="replay", out=folder)
    assert doc["ran"] == [] and doc["resumed"] == ["12p_RMSNorm"]
    assert doc["tasks"] == load_records(folder) == [done]
    assert json.loads((folder / "summary.json").read_text())["fast_0"] == 1.0


def test_bench_agent_refuses_what_it_cannot_run(tmp_path):
    with pytest.raises(BenchError, match="unknown task"):
        run_bench_agent(["99p_Nothing"], model="replay", out=tmp_path)
    with pytest.raises(BenchError, match="mode"):
        run_bench_agent(["8p_GEMM"], mode="hitl", model="replay", out=tmp_path)
    assert not (tmp_path / "records").exists()


def test_the_replay_model_skips_tasks_it_has_no_recording_for_and_says_so(tmp_path):
    said = []
    doc = run_bench_agent(["1p_Flash_Attention"], model="replay", out=tmp_path, progress=said.append)
    assert doc["ran"] == [] and doc["tasks"] == [] and [s["task"] for s in doc["skipped"]] == ["1p_Flash_Attention"]
    assert "no recording for 1p_Flash_Attention" in doc["skipped"][0]["reason"]
    assert any("skipping 1 of 1 tasks" in line for line in said)
    assert not (tmp_path / "records").exists() or not list((tmp_path / "records").iterdir())
    assert json.loads((tmp_path / "meta.json").read_text())["skipped"][0]["task"] == "1p_Flash_Attention"


def test_two_suites_are_reported_side_by_side(tmp_path):
    rw = [record("rw_causal_conv1d", "rw", correct=True, speedup=3.0, suite="realworld"),
          record("rw_fp8_matmul", "rw", correct=False, failure="incorrect", suite="realworld")]
    s = summarize(RECORDS + rw)
    assert list(s["by_suite"]) == ["jaxbench", "realworld"]
    assert s["by_suite"]["realworld"]["tasks"] == 2 and s["by_suite"]["realworld"]["geomean_speedup"] == pytest.approx(3.0)
    assert s["by_suite"]["jaxbench"]["tasks"] == 5
    folder = write(tmp_path / "results", RECORDS + rw)
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "skipped": [{"task": "rw_x", "reason": "no recording"}]}))
    text = Path(render_report(folder)["markdown"]).read_text()
    assert "The suites side by side" in text and "| jaxbench | realworld |" in text.replace("  ", " ")
    assert "Skipped (1), not counted above: rw_x (no recording)" in text
    alone = summarize(RECORDS)  # one suite: no side-by-side table
    assert list(alone["by_suite"]) == ["jaxbench"]


def test_bench_agent_over_the_realworld_suite_with_replay_runs_and_says_what_it_skipped(tmp_path, capsys):
    import jaxbench

    assert main(["bench", "agent", "--suite", "realworld", "--all", "--model", "replay", "--out",
                 str(tmp_path / "rw"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(s["task"] for s in doc["skipped"]) == jaxbench.task_names("realworld")
    assert doc["summary"]["tasks"] == 0
