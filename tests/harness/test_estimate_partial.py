"""A profile that runs out of memory (or time) at a larger planned size is fitted on the smaller sizes that finished.

The sizes are profiled smallest first, so when libtpu's profiler hits the address-space guard on the largest one
(18 of the suites' programs did at 16 GiB), the smaller profiles are whole. The recorded jobs of a real estimate
are replayed with the trusted profile job cut short after some sizes, as a memory-guard crash or a timeout."""

import pytest
from _extras import need_module

from maxkernel import chips
from maxkernel.harness.estimate import estimator as est
from maxkernel.tasks import load_task

pytestmark = [pytest.mark.slow, pytest.mark.integration]

_OOM = "E1205 pjrt.cc:1] mmap error: 12 while reserving"


@pytest.fixture(scope="module")
def recorded():
    """The two jobs of one real estimate (8p_GEMM's XLA baseline on v5e), as _profile received them."""
    need_module("libtpu", extra="tpu")
    calls = []
    real = est._run

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out)
        return out

    task, chip = load_task("8p_GEMM"), chips.get("v5e")
    mp = pytest.MonkeyPatch()
    mp.setattr(est, "_run", spy)
    try:
        whole = est._profile(task, None, chip, "full", None, None, [])
    finally:
        mp.undo()
    assert whole.ok, whole.error
    return task, chip, whole, calls


def _replay(monkeypatch, calls, keep: int, status: str):
    plan, profile = calls
    points = [ln for ln in profile["lines"] if "point" in ln]
    starting = [ln for ln in profile["lines"] if "starting" in ln]
    cut = {**profile, "status": status, "result": {}, "stderr": _OOM if status == "crashed" else "",
           "lines": points[:keep] + starting[keep:keep + 1]}
    replies = iter([plan, cut])
    monkeypatch.setattr(est, "_run", lambda *a, **k: next(replies))
    return len(points)


def _replay_then_real(monkeypatch, replies: list) -> list:
    """_run answers with `replies`, then runs the real jobs; returns the jobs it was given, in order."""
    jobs, left, real = [], iter(replies), est._run

    def run(job, *args, **kwargs):
        jobs.append(job)
        return next(left, None) or real(job, *args, **kwargs)

    monkeypatch.setattr(est, "_run", run)
    return jobs


def _oom_at_first(profile: dict) -> dict:
    """The recorded profile job, crashed on the memory guard as it started its first (smallest) size."""
    starting = [ln for ln in profile["lines"] if "starting" in ln]
    return {**profile, "status": "crashed", "result": {}, "stderr": _OOM, "lines": starting[:1]}


def _halved(plan: dict) -> dict:
    """The recorded planning job with every profiled size's dims halved: a plan that goes lower."""
    return {**plan, "lines": [{"lowered": {**ln["lowered"], "dims": {k: (v // 2 if isinstance(v, int) else v)
                                                                     for k, v in ln["lowered"]["dims"].items()}}}
                              if "lowered" in ln else ln for ln in plan["lines"]]}


@pytest.mark.parametrize("status, stage", [("crashed", "memory"), ("timeout", "timeout")])
def test_a_larger_size_out_of_memory_or_time_leaves_a_fit_on_the_smaller_ones(recorded, monkeypatch, status, stage):
    task, chip, whole, calls = recorded
    planned = _replay(monkeypatch, calls, 2, status)
    assert planned >= 3, "the recorded plan needs a size beyond the two kept"
    part = est._profile(task, None, chip, "full", None, None, [])
    assert part.ok and part.partial_stage == stage
    said = [ln for ln in part.limits if ln.startswith(est.PARTIAL_FIT)]
    assert said and f"2 of {planned} planned sizes" in said[0]
    assert ("memory guard" if stage == "memory" else "did not finish") in said[0]
    assert len(part.fit["points"]) == 2
    # A GEMM's cycles are a line in its work: the two smaller sizes read the full size as all of them do.
    assert part.estimated_ms == pytest.approx(whole.estimated_ms, rel=0.05)


def test_with_fewer_than_two_sizes_the_failure_stands(recorded, monkeypatch):
    """Out of time after one size: nothing to fit (out of memory there, the sizes are planned again: below)."""
    task, chip, _, calls = recorded
    _replay(monkeypatch, calls, 1, "timeout")
    part = est._profile(task, None, chip, "full", None, None, [])
    assert not part.ok and part.stage == "timeout" and "did not finish" in part.error


def test_sizes_that_disagree_on_the_cost_of_the_work_are_not_fitted(recorded, monkeypatch):
    """29k's XLA baseline on v6e took 4.3 times the cycles for twice the work between its two smaller sizes, and the
    line through them read 2.16 ms against a 0.3 ms floor. The same replay with the second size's cycles made 4.3
    times the first's per unit of work: the memory guard's failure stands, saying why the two were not fitted."""
    task, chip, _, calls = recorded
    plan, profile = calls
    points = [ln for ln in profile["lines"] if "point" in ln]
    first, second = points[0]["point"], points[1]["point"]
    per_first = sum(first["ops"].values()) / first["x"]
    scale = 4.3 * per_first * second["x"] / sum(second["ops"].values())
    doctored = {**points[1], "point": {**second, "ops": {k: int(v * scale) for k, v in second["ops"].items()}}}
    cut = {**profile, "status": "crashed", "result": {}, "stderr": _OOM, "lines": [points[0], doctored]}
    replies = iter([plan, cut])
    monkeypatch.setattr(est, "_run", lambda *a, **k: next(replies))
    part = est._profile(task, None, chip, "full", None, None, [])
    assert not part.ok and part.stage == "memory"
    assert "not fitted" in part.error and "differ 4.3 times" in part.error


@pytest.mark.timeout(900)  # a real plan and profile at the smaller budget: 25 s quiet, past 300 s on a loaded machine
def test_out_of_memory_at_the_smallest_size_is_planned_again_smaller_and_priced(recorded, monkeypatch):
    """4p's and 5p's XLA baselines on v5e ran the profiler out of memory at the smallest size their work budget
    allowed, so no size was profiled. The replay crashes the first profile the same way; the sizes are then planned
    for a budget MEMORY_SHRINK times smaller, profiled for real, and priced as the whole profile priced them."""
    task, chip, whole, calls = recorded
    plan, profile = calls
    crash = _oom_at_first(profile)
    jobs = _replay_then_real(monkeypatch, [plan, crash])
    again = est._profile(task, None, chip, "full", None, None, [])
    assert again.ok, again.error
    said = [ln for ln in again.limits if ln.startswith(est.MEMORY_RETRIED)]
    assert said and "memory guard" in said[0]
    first, second = jobs[0]["budget"], jobs[2]["budget"]
    assert second["flops"] == pytest.approx(first["flops"] / est.MEMORY_SHRINK)
    smallest = lambda p: min(float(ln["lowered"]["x"]) for ln in p["lines"] if "lowered" in ln)  # noqa: E731
    assert min(pt["x"] for pt in again.fit["points"]) < smallest(plan)
    assert again.estimated_ms == pytest.approx(whole.estimated_ms, rel=0.1)


@pytest.mark.timeout(900)
def test_out_of_memory_again_at_the_smaller_plan_is_planned_smaller_once_more(recorded, monkeypatch):
    """rw_gated_deltanet_chunk's XLA baseline on v5e ran the profiler out of memory at its first plan and again at the
    plan 8 times smaller (one sequence, 16 of 32 heads). The replay crashes both (the second plan's sizes lower than
    the first's); the third plan, 64 times smaller, is profiled for real and priced, saying both."""
    task, chip, whole, calls = recorded
    plan, profile = calls
    crash = _oom_at_first(profile)
    lower = _halved(plan)
    jobs = _replay_then_real(monkeypatch, [plan, crash, lower, crash])
    again = est._profile(task, None, chip, "full", None, None, [])
    assert again.ok, again.error
    said = next(ln for ln in again.limits if ln.startswith(est.MEMORY_RETRIED))
    assert f"{est.MEMORY_SHRINK ** 2} times smaller after" in said and f"{est.MEMORY_SHRINK} times smaller:" in said
    assert jobs[4]["budget"]["flops"] == pytest.approx(jobs[0]["budget"]["flops"] / est.MEMORY_SHRINK ** 2)


def test_out_of_memory_stands_when_the_sizes_go_no_lower(recorded, monkeypatch):
    task, chip, _, calls = recorded
    plan, profile = calls
    crash = _oom_at_first(profile)
    replies = iter([plan, crash, plan])  # the second plan reaches the same smallest size
    monkeypatch.setattr(est, "_run", lambda *a, **k: next(replies))
    part = est._profile(task, None, chip, "full", None, None, [])
    assert not part.ok and part.stage == "memory"
    assert est.MEMORY_RETRIED in part.error and "go no lower" in part.error


def test_a_smaller_plan_that_falls_back_to_the_whole_program_is_not_profiled(recorded, monkeypatch):
    """rw_gated_deltanet_chunk on v5e: the plan 64 times smaller could not reach its budget (its heads shrink no
    further) and fell back to profiling the whole program at full size, which ran out of memory after minutes. A
    plan made because smaller sizes ran out of memory stops there instead, saying why."""
    task, chip, _, calls = recorded
    plan, profile = calls
    crash = _oom_at_first(profile)
    full = next(ln["plan"]["full_dims"] for ln in plan["lines"] if "plan" in ln)
    why = "cannot shrink the program below the profiling budget: P4: already 1"
    whole = {**plan, "lines": [{"plan": {**ln["plan"], "whole": why}} if "plan" in ln else
                               {"lowered": {**ln["lowered"], "dims": full, "x": 1.0}} if "lowered" in ln else ln
                               for ln in plan["lines"]]}
    replies = iter([plan, crash, whole, crash])
    jobs = []
    monkeypatch.setattr(est, "_run", lambda job, *a, **k: jobs.append(job) or next(replies))
    part = est._profile(task, None, chip, "full", None, None, [])
    assert not part.ok and part.stage == "memory" and "go no lower" in part.error and "already 1" in part.error
    assert len(jobs) == 3  # the whole program's plan was made, never profiled


def test_the_glue_that_cannot_be_profiled_leaves_the_estimate_standing_and_says_so(recorded, monkeypatch):
    """The program around a kernel's pallas_calls, profiled at full size for its sorts, is an extra: its profile out
    of memory (the indexer's prefill sort of 16384 x 16384 on v5e), or a glue the planning job could not lower apart,
    leaves the sizes' fit as it is, with a limit saying the sorts were priced with the rest."""
    task, chip, whole, calls = recorded
    plan, profile = calls
    dims = next(ln["plan"]["full_dims"] for ln in plan["lines"] if "plan" in ln)
    glue = {"glue": True, "dims": dims, "x": 1.0, "tiles": None, "file": "lowered/glue.mlir"}
    planned = {**plan, "lines": plan["lines"] + [{"lowered": glue}],
               "lowered": {**plan["lowered"], glue["file"]: "module {}"}}
    crashed = {**profile, "status": "crashed", "result": {}, "stderr": _OOM,
               "lines": profile["lines"] + [{"starting": {"glue": dims}}]}
    replies = iter([planned, crashed])
    monkeypatch.setattr(est, "_run", lambda *a, **k: next(replies))
    out = est._profile(task, None, chip, "full", None, None, [])
    assert out.ok and out.estimated_ms == pytest.approx(whole.estimated_ms)
    assert any(ln.startswith(est.GLUE_FAILED) and "memory guard" in ln for ln in out.limits), out.limits
    assert out.partial_stage is None

    skipped = {**plan, "lines": plan["lines"] + [{"glue_skipped": "a pallas_call sits inside a loop or a branch"}]}
    replies = iter([skipped, profile])
    monkeypatch.setattr(est, "_run", lambda *a, **k: next(replies))
    out = est._profile(task, None, chip, "full", None, None, [])
    assert out.ok and any(ln.startswith(est.GLUE_FAILED) and "inside a loop" in ln for ln in out.limits)


def test_a_whole_profile_that_fails_says_it_was_whole_and_how_to_let_it_shrink(recorded, monkeypatch):
    """XLA's program that no dim shrinks is profiled whole at full size; when that profile runs out of memory, the
    failure says it was whole and why, and the hint names what would let it shrink (a parallel dim), not a smaller
    budget, which cannot help. The retry for a smaller budget meets the same whole plan and stops there."""
    task, chip, _, calls = recorded
    plan, profile = calls
    head = next(ln for ln in plan["lines"] if "plan" in ln)
    whole = "cannot shrink the program below the profiling budget: K: a dot contracts it"
    planned = {**plan, "lines": [{**head, "plan": {**head["plan"], "whole": whole}}]
               + [ln for ln in plan["lines"] if "plan" not in ln]}
    crashed = {**profile, "status": "crashed", "result": {}, "stderr": _OOM,
               "lines": [ln for ln in profile["lines"] if "starting" in ln][:1]}
    replies = iter([planned, crashed, planned])
    monkeypatch.setattr(est, "_run", lambda *a, **k: next(replies))
    out = est._profile(task, None, chip, "full", None, None, [])
    assert not out.ok and out.stage == "memory"
    assert f"(profiled whole at full size: {whole})" in out.error and "go no lower" in out.error, out.error
    assert out.hint == est.WHOLE_HINT and "PARALLEL_DIMS" in out.hint


def test_larger_sizes_out_of_time_leave_the_first_estimate_uncached(recorded, monkeypatch):
    """The second profile of an under-floor XLA program at sizes GROW times larger ran out of time after one size
    (the machine's load: rw_w8a8's and 13p's re-runs met it): the first estimate stands, says so, and is marked cut
    short by time, which the cache refuses, so a quieter run profiles the larger sizes again."""
    task, chip, whole, calls = recorded
    _replay(monkeypatch, calls, 1, "timeout")
    out = est._larger(task, None, chip, "full", None, None, whole.model_copy(deep=True))
    assert out.ok and out.estimated_ms == whole.estimated_ms and out.partial_stage == "timeout"
    assert any(ln.startswith(f"{est.GROWN} {est.GROW} times larger, which failed") and "did not finish" in ln
               for ln in out.limits)


def test_a_compile_failure_inside_a_memory_replan_grows_from_that_plans_budget(recorded, monkeypatch):
    """The first plan runs out of memory, the plan 8 times smaller reaches a shrunk size XLA:TPU does not compile (as
    28k's one image). The sizes above it are planned for a budget GROW times that plan's (2 times smaller than the
    first), not GROW times the first's, which already ran out of memory; and that plan is not grown once more."""
    task, chip, _, calls = recorded
    plan, profile = calls
    crash = _oom_at_first(profile)
    lower = _halved(plan)
    at = next(ln["lowered"]["dims"] for ln in lower["lines"] if "lowered" in ln)
    refused = {**profile, "status": "ok", "stderr": "", "lines": [{"starting": at}],
               "result": {"status": "error", "stage": "compile", "error": "Expected instruction to have shape"}}
    replies = iter([plan, crash, lower, refused, lower])  # the grown plan reaches `at` again: not profiled
    jobs = []
    monkeypatch.setattr(est, "_run", lambda job, *a, **k: jobs.append(job) or next(replies))
    part = est._profile(task, None, chip, "full", None, None, [])
    assert not part.ok and part.stage == "memory" and len(jobs) == 5
    assert jobs[4]["budget"]["flops"] == pytest.approx(jobs[0]["budget"]["flops"] * est.GROW / est.MEMORY_SHRINK)
    assert "still include" in part.error and est.MEMORY_RETRIED in part.error
