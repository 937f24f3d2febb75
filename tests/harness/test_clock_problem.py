"""The timing's clock check: a wall-clock loop whose samples leave too much of its span unaccounted for is forged,
unless the gap is the load a busy machine puts between calls (seen: an honest baseline loop left 29 % of its
span at load average 8, and the kernel was rejected as forged)."""

import pytest

from maxkernel.harness.verdict.evaluate import _clock_problem

pytestmark = pytest.mark.unit


def timing(samples_ms, span_ms, start=100.0):
    return {"kernel_ms": samples_ms, "source": "wall", "window": [start, start + span_ms / 1e3]}


def test_a_loop_preempted_between_calls_is_not_forged():
    # 3 samples of ~6.9 ms in a 29.4 ms loop: 29 % of the span between calls, the gap the loaded machine left.
    assert _clock_problem("kernel", timing([6.9, 7.0, 6.9], 29.4), None) is None


def test_samples_cut_to_a_fraction_of_the_loop_are_forged():
    # The same loop reported 2.5x faster than it ran: 60 % of the span unaccounted for.
    said = _clock_problem("kernel", timing([2.8, 2.8, 2.8], 29.4), None)
    assert said and "account for too little" in said and "forged" in said
    # ... and the v2 attack's 100x.
    assert "forged" in _clock_problem("kernel", timing([0.07, 0.07, 0.07], 21.0), None)


def test_the_judges_own_baseline_is_never_called_forged_for_a_gap():
    # The baseline is timed in the judge's process after the candidate's has exited: a gap there is load.
    gapped = timing([2.8, 2.8, 2.8], 29.4)
    assert _clock_problem("baseline", gapped, None, judge=True) is None
    assert "forged" in _clock_problem("baseline", gapped, None)  # the rule itself still applies elsewhere


def test_samples_that_overfill_the_loop_are_forged_even_for_the_judge():
    assert "do not fit" in _clock_problem("baseline", timing([20.0, 20.0], 29.4), None, judge=True)
