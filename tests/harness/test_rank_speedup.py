"""What candidates are ranked by: the estimated TPU speedup off a TPU, measured speedup on one, labelled either way."""

import pytest

from maxkernel.evals.stats import summarize
from maxkernel.harness.verdict.result import rank_speedup

pytestmark = pytest.mark.unit

EST = {"ok": True, "chip": "v5e", "speedup_estimate": 1.22}


def test_off_a_tpu_the_estimate_ranks():
    value, label = rank_speedup({"backend": "cpu", "speedup": 0.0016, "estimate": EST})
    assert value == 1.22 and label.startswith("estimated TPU speedup on v5e")


@pytest.mark.parametrize("estimate", [None, {"ok": False, "error": "libtpu aborted"}, {"ok": True}])
def test_without_a_usable_estimate_the_cpu_figure_ranks_and_says_so(estimate):
    value, label = rank_speedup({"backend": "cpu", "speedup": 0.0016, "estimate": estimate})
    assert value == 0.0016 and "CPU interpreter" in label and "no TPU estimate" in label


def test_a_program_that_changes_with_the_size_is_not_ranked_at_all():
    """Its estimate was withheld (the priced program is not the checked one): its CPU figure must not rank it
    either, or withholding the estimate would only move it to another ranking."""
    withheld = {"ok": False, "stage": "program", "error": "not estimated: the program priced ..."}
    value, label = rank_speedup({"backend": "cpu", "speedup": 9.5, "estimate": withheld})
    assert value is None and label.startswith("not ranked")


def test_on_a_tpu_measured_time_is_the_truth_and_the_estimate_only_rides_along():
    value, label = rank_speedup({"backend": "tpu", "speedup": 1.5, "estimate": EST})
    assert value == 1.5 and label == "measured on tpu"


def test_the_summary_ranks_by_the_estimate_and_keeps_the_measured_figures():
    records = [{"task": "a", "correct": True, "speedup": 0.002, "rank_speedup": 1.5,
                "rank_label": "estimated TPU speedup on v5e (libtpu static profile)"},
               {"task": "b", "correct": True, "speedup": 0.003, "rank_speedup": 0.8,
                "rank_label": "estimated TPU speedup on v5e (libtpu static profile)"},
               {"task": "c", "correct": False, "speedup": None, "rank_speedup": None, "failure": "incorrect"}]
    s = summarize(records)
    assert s["fast_1"] == pytest.approx(1 / 3) and s["geomean_speedup"] == pytest.approx((1.5 * 0.8) ** 0.5)
    assert s["speedup_source"].startswith("estimated TPU speedup")
    assert s["measured"]["fast_0"] == pytest.approx(2 / 3) and s["measured"]["fast_1"] == 0.0
    assert s["measured"]["geomean_speedup"] == pytest.approx((0.002 * 0.003) ** 0.5)


def test_old_records_without_rank_speedup_still_summarise():
    s = summarize([{"task": "a", "correct": True, "speedup": 2.0}])
    assert s["fast_1"] == 1.0 and s["geomean_speedup"] == 2.0 and "measured" not in s
