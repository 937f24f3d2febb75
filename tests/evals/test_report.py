"""The report of a results folder: fast_p per tier, speedup statistics, failures, cost, plots, CPU warning, and
no figure that combines speedups of two sources."""

import json
from pathlib import Path

import pytest

from maxkernel.bench_agent import BenchError, load_records, run_bench_agent
from maxkernel.cli import main
from maxkernel.evals.judging import Judgement
from maxkernel.evals.stats import summarize
from maxkernel.harness.verdict.result import rank_speedup
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
    cpu = "CPU interpreter, not TPU time"
    assert f"| tier | tasks | correct | fast_0 ({cpu}) | fast_1 ({cpu}) | fast_1.5 ({cpu}) | fast_2 ({cpu}) |" in md
    assert "| p | 3 | 2 | 67% (2/3) | 67% (2/3) | 33% (1/3) | 33% (1/3) |" in md
    assert "| all | 5 | 3 | 60% (3/5) | 40% (2/5) | 20% (1/5) | 20% (1/5) |" in md
    assert "2p_Unfinished" not in md
    # The CPU caveat comes first, before any number.
    assert md.index(CPU_WARNING) < md.index("fast_p") and CPU_WARNING in html
    for section in ("Failures", "| compile | 1 | 50k_Other |", f"per correct-and-faster kernel (2, by {cpu})", "$0.0350"):
        assert section in md
    assert len(doc["plots"]) == 2
    for png in doc["plots"]:
        data = Path(png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        name = png.rsplit("/", 1)[1]
        assert f"]({name})" in md and f'src="{name}"' in html
    assert "<table>" in html and f"<th>fast_1.5 ({cpu})</th>" in html


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
    doc = run_bench_agent(["2p_GQA_Attention"], model="replay", out=tmp_path, progress=said.append)
    assert doc["ran"] == [] and doc["tasks"] == [] and [s["task"] for s in doc["skipped"]] == ["2p_GQA_Attention"]
    assert "no recording for 2p_GQA_Attention" in doc["skipped"][0]["reason"]
    assert any("skipping 1 of 1 tasks" in line for line in said)
    assert not (tmp_path / "records").exists() or not list((tmp_path / "records").iterdir())
    assert json.loads((tmp_path / "meta.json").read_text())["skipped"][0]["task"] == "2p_GQA_Attention"


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
    from maxkernel.agents.replay.model import recorded_tasks

    # The real-world tasks the replay model has no recording for (two have one: rw_rglru_scan, rw_causal_conv1d).
    unrecorded = [t for t in jaxbench.task_names("realworld") if t not in recorded_tasks()]
    assert len(unrecorded) == len(jaxbench.task_names("realworld")) - 2
    assert main(["bench", "agent", "--suite", "realworld", "--tasks", ",".join(unrecorded), "--model", "replay",
                 "--out", str(tmp_path / "rw"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(s["task"] for s in doc["skipped"]) == sorted(unrecorded)
    assert doc["summary"]["tasks"] == 0


# -- speedups of different sources -----------------------------------------------------------------------------
def judged(task, tier, *, cpu, estimate=None, ref_cpu=None, ref_estimate=None):
    """A correct CPU-run record as `bench agent` writes it (bench_agent._record): its own fields, then the
    Judgement's, whose ranks judge_kernel takes from verdict.rank_speedup on each kernel's verdict."""
    def verdict(speedup, est):
        return {"status": "correct", "backend": "cpu", "speedup": speedup,
                "estimate": {"ok": True, "chip": "v5e", "speedup_estimate": est} if est else None}

    rank, label = rank_speedup(verdict(cpu, estimate))
    ref_rank, ref_label = rank_speedup(verdict(ref_cpu, ref_estimate)) if ref_cpu else (None, "")
    j = Judgement(task=task, size="smoke", kernel=f"runs/kernels/{task}/kernel.py", status="correct", failure=None,
                  reason="correct on 3 seeds", seeds=[7919, 7920, 7921], backend="cpu", chip="cpu",
                  flags=["cpu_timing"], speedup=cpu, speedup_low=cpu * 0.9, speedup_high=cpu * 1.1,
                  reference_speedup=ref_cpu, speedup_vs_reference=cpu / ref_cpu if ref_cpu else None,
                  roofline_fraction=cpu / 100, rank_speedup=rank, rank_label=label, estimated_speedup=estimate,
                  estimate_chip="v5e" if estimate else None, reference_rank_speedup=ref_rank,
                  reference_rank_label=ref_label, verdict=verdict(cpu, estimate))
    rec = {"record_version": 1, "task": task, "tier": tier, "suite": "jaxbench", "mode": "auto", "size": "smoke",
           "started_at": "2025-01-01T00:00:00+00:00", "finished": True, "correct": True, "judged": "answer",
           "agent_status": "correct", "stop_reason": "", "model": "gemini-3.5-flash", "replay": False,
           "iterations": 2, "llm_calls": 10, "tokens": 1000, "cost_usd": 0.01, "session_id": f"bench-x-{task}"}
    rec.update({k: v for k, v in j.as_dict().items() if k not in ("task", "size")})
    return {**rec, "wall_s": 30.0, "finished_at": "2025-01-01T00:01:00+00:00"}


MIXED = [
    judged("1p_Flash_Attention", "p", cpu=0.01, estimate=1.5, ref_cpu=0.02),  # the reference has no estimate
    judged("8p_GEMM", "p", cpu=0.0086, ref_cpu=0.0048, ref_estimate=1.3),  # the agent's kernel has none
    judged("12p_RMSNorm", "p", cpu=0.004, estimate=0.61, ref_cpu=0.005, ref_estimate=0.8),
    record("50k_Other", "k", correct=False, failure="compile"),
]
EST, CPU = "TPU estimate", "CPU interpreter, not TPU time"


def test_a_headline_figure_combines_one_source_and_lists_the_others_apart(tmp_path):
    s = summarize(MIXED)
    assert s["source"] == "tpu_estimate" and s["source_label"] == EST
    # Only the estimates: GEMM's interpreter ratio is never multiplied in.
    assert s["geomean_speedup"] == pytest.approx((1.5 * 0.61) ** 0.5)
    assert s["figures"]["geomean_speedup"] == {"source": "tpu_estimate", "rows": ["1p_Flash_Attention", "12p_RMSNorm"]}
    assert s["rows"] == ["1p_Flash_Attention", "12p_RMSNorm", "50k_Other"] and s["fast_1"] == pytest.approx(1 / 3)
    [apart] = s["apart"]
    assert (apart["source"], apart["rows"]) == ("cpu_interpreter", ["8p_GEMM"])
    assert apart["geomean_speedup"] == pytest.approx(0.0086)
    assert s["by_tier"]["p"]["apart"][0]["rows"] == ["8p_GEMM"] and s["by_tier"]["k"]["geomean_speedup"] is None
    md = Path(render_report(write(tmp_path / "results", MIXED))["markdown"]).read_text()
    assert "| all | 0.957x | 1.05x |" in md and "| all | 4 | 3 | 1 | 67% (2/3) | 33% (1/3) |" in md
    assert "0.199x" not in md  # the geomean of all three rows, sources mixed
    assert "Other speedup sources (not folded into the figures above)" in md and "| 8p_GEMM | 0.0086x |" in md
    assert f"listed apart under \"Other speedup sources\", not folded into these figures: {CPU}: 8p_GEMM" in md


def test_vs_reference_is_na_where_the_two_kernels_speedups_differ_in_source(tmp_path):
    s = summarize(MIXED)
    assert s["geomean_speedup_vs_reference"] == pytest.approx(0.61 / 0.8) and s["with_reference"] == 1
    assert s["figures"]["geomean_speedup_vs_reference"]["rows"] == ["12p_RMSNorm"]
    assert s["vs_reference_na"] == {"1p_Flash_Attention": "n/a (sources differ)"}
    assert s["apart"][0]["vs_reference_na"] == {"8p_GEMM": "n/a (sources differ)"}
    assert s["apart"][0]["geomean_speedup_vs_reference"] is None
    md = Path(render_report(write(tmp_path / "results", MIXED))["markdown"]).read_text()
    gemm = next(line for line in md.splitlines() if line.startswith("| 8p_GEMM | p |"))
    assert "n/a (sources differ)" in gemm and "1.79x" not in md  # GEMM's CPU ratio vs the reference's estimate
    assert "| all | 0.957x |" in md and "0.762x (n=1)" in md


def test_every_speedup_column_and_plot_axis_names_its_source(tmp_path):
    doc = render_report(write(tmp_path / "results", MIXED))
    md = Path(doc["markdown"]).read_text()
    lines = md.splitlines()
    heads = [cell.strip() for i, line in enumerate(lines[:-1]) if lines[i + 1].startswith("|---")
             for cell in line.strip("|").split("|")]
    assert "speedup (TPU estimate)" in heads and f"speedup [spread] ({CPU})" in heads
    assert f"vs reference ({EST})" in heads and f"vs reference ({CPU})" in heads and f"geomean ({EST})" in heads
    speedish = [h for h in heads if any(w in h for w in ("speedup", "geomean", "median", "IQR", "fast_", "vs ref"))]
    assert speedish and all(EST in h or CPU in h for h in speedish), speedish
    panels = [(Path(p["plot"]).name, p["source"], p["rows"]) for p in doc["plot_panels"]]
    headline = ["1p_Flash_Attention", "12p_RMSNorm", "50k_Other"]  # one source per axis, failures with the headline
    assert panels == [("report_speedup_per_task.png", "tpu_estimate", headline),
                      ("report_speedup_per_task.png", "cpu_interpreter", ["8p_GEMM"]),
                      ("report_cost_vs_speedup.png", "tpu_estimate", headline),
                      ("report_cost_vs_speedup.png", "cpu_interpreter", ["8p_GEMM"])]
    assert [p["ylabel"] for p in doc["plot_panels"][:2]] == [f"speedup vs XLA ({EST}), log scale",
                                                             f"speedup vs XLA ({CPU}), log scale"]


def test_report_json_names_each_figures_source_and_rows(tmp_path, capsys):
    folder = write(tmp_path / "results", MIXED)
    assert main(["report", str(folder), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["summary"]
    assert s["figures"]["fast_p"] == {"source": "tpu_estimate",
                                      "rows": ["1p_Flash_Attention", "12p_RMSNorm", "50k_Other"]}
    assert s["figures"]["geomean_speedup_vs_reference"] == {"source": "tpu_estimate", "rows": ["12p_RMSNorm"]}
    assert [(a["source"], a["figures"]["geomean_speedup"]["rows"]) for a in s["apart"]] == [
        ("cpu_interpreter", ["8p_GEMM"])]
    assert main(["report", str(folder)]) == 0
    assert f"headline figures by {EST} (2 kernels); apart, not folded in: {CPU} (8p_GEMM)" in capsys.readouterr().out


def test_bench_agent_rows_show_the_speedup_the_task_is_ranked_by_named_by_its_source():
    # A correct kernel off a TPU is ranked by its TPU estimate; its record also keeps the interpreter's wall-time
    # ratio (0.0094x here). The row printed under an estimate's headline must be the estimate, named as such.
    from maxkernel.cli.bench import summary_lines

    est = record("12p_RMSNorm", "p", correct=True, speedup=0.0094, rank_speedup=1.22, estimate_chip="v5e",
                 rank_label="estimated TPU speedup on v5e (libtpu static profile)")
    cpu = record("8p_GEMM", "p", correct=True, speedup=0.5, rank_label="CPU interpreter wall time")
    lines = summary_lines({"summary": summarize([est]), "tasks": [est], "out": "o"})
    assert "1.22x vs XLA (TPU estimate on v5e)" in lines[0] and "0.0094" not in lines[0]
    assert not any(line.startswith("CPU:") for line in lines)  # nothing printed is an interpreter ratio
    both = summary_lines({"summary": summarize([est, cpu]), "tasks": [est, cpu], "out": "o"})
    assert "0.5x vs XLA (CPU interpreter, not TPU time)" in both[1]
    assert any(line.startswith("CPU:") for line in both)
