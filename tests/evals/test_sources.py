"""Which source a record's speedups come from, read off what the harness recorded, and the best one for a figure."""

import pytest

from maxkernel.evals import sources
from maxkernel.evals.judging import judge_kernel
from maxkernel.evals.stats import summarize
from maxkernel.harness.verdict.result import rank_speedup
from maxkernel.tasks import load_task

EST = {"ok": True, "chip": "v5e", "speedup_estimate": 0.61}


def ranked_record(task: str, verdict: dict) -> dict:
    """The speedup fields a bench record takes from judge_kernel, whose rank comes from verdict.rank_speedup."""
    rank, label = rank_speedup(verdict)
    return {"task": task, "correct": True, "backend": verdict["backend"], "speedup": verdict["speedup"],
            "flags": ["cpu_timing"] if verdict["backend"] == "cpu" else [], "rank_speedup": rank, "rank_label": label,
            "estimated_speedup": (verdict.get("estimate") or {}).get("speedup_estimate")}


@pytest.mark.unit
@pytest.mark.parametrize("verdict, source", [
    ({"backend": "cpu", "speedup": 0.004, "estimate": EST}, "tpu_estimate"),
    ({"backend": "cpu", "speedup": 0.004, "estimate": None}, "cpu_interpreter"),
    ({"backend": "cpu", "speedup": 0.004, "estimate": {"ok": False, "error": "libtpu aborted"}}, "cpu_interpreter"),
    ({"backend": "tpu", "speedup": 1.3, "estimate": EST}, "tpu_measured"),
    ({"backend": "cpu", "speedup": 9.5, "estimate": {"ok": False, "stage": "program"}}, None),
])
def test_the_source_is_the_one_the_harness_labelled(verdict, source):
    assert sources.rank_source(ranked_record("t", verdict)) == source


@pytest.mark.unit
def test_a_kernel_the_harness_declined_to_rank_is_in_no_figure():
    rec = ranked_record("9p_X", {"backend": "cpu", "speedup": 9.5, "estimate": {"ok": False, "stage": "program"}})
    s = summarize([rec, ranked_record("8p_GEMM", {"backend": "cpu", "speedup": 0.01, "estimate": None})])
    assert s["geomean_speedup"] == pytest.approx(0.01) and s["rows"] == ["8p_GEMM"]  # its 9.5x ranks nothing
    assert [(a["source"], a["rows"], a["geomean_speedup"]) for a in s["apart"]] == [(None, ["9p_X"], None)]


@pytest.mark.unit
def test_measured_on_a_tpu_beats_an_estimate_which_beats_the_interpreter():
    assert sources.best(["cpu_interpreter", "tpu_estimate", "tpu_measured"]) == "tpu_measured"
    assert sources.best(["cpu_interpreter", "tpu_estimate"]) == "tpu_estimate"
    s = summarize([ranked_record("8p_GEMM", {"backend": "tpu", "speedup": 1.3, "estimate": EST}),
                   ranked_record("12p_RMSNorm", {"backend": "cpu", "speedup": 0.004, "estimate": EST})])
    assert (s["source"], s["source_label"], s["geomean_speedup"]) == ("tpu_measured", "TPU measured", 1.3)
    assert [(a["source"], a["rows"]) for a in s["apart"]] == [("tpu_estimate", ["12p_RMSNorm"])]
    # The harness's own timings beside them: one measured source too, never TPU and interpreter times together.
    assert s["measured"]["source"] == "tpu_measured" and s["measured"]["rows"] == ["8p_GEMM"]


@pytest.mark.unit
def test_an_older_record_with_only_the_references_interpreter_time_has_no_estimated_vs_reference():
    """Written before judging recorded the reference's rank: its reference figure is the measured one."""
    rec = {**ranked_record("12p_RMSNorm", {"backend": "cpu", "speedup": 0.004, "estimate": EST}),
           "reference_speedup": 0.005, "speedup_vs_reference": 0.8}
    assert sources.vs_reference(rec) == (None, "tpu_estimate", "n/a (sources differ)")
    cpu = {**ranked_record("8p_GEMM", {"backend": "cpu", "speedup": 0.004, "estimate": None}),
           "reference_speedup": 0.005, "speedup_vs_reference": 0.8}
    value, source, why = sources.vs_reference(cpu)
    assert (source, why) == ("cpu_interpreter", "") and value == pytest.approx(0.8)


@pytest.mark.integration
def test_judging_records_the_reference_kernels_rank_beside_the_agents():
    """The shipped reference judged as if it were the agent's kernel: both ranks of one source, ratio 1."""
    j = judge_kernel("12p_RMSNorm", load_task("12p_RMSNorm").reference_kernel, "smoke")
    assert j.correct and j.reference_rank_label == j.rank_label and j.reference_rank_speedup == j.rank_speedup
    value, source, why = sources.vs_reference(j.as_dict())
    assert source == sources.rank_source(j.as_dict()) and why == "" and value == pytest.approx(1.0)
