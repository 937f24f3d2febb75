"""Verdict v2: nothing a candidate kernel runs can forge its own verdict. Each test attacks one hole.

The layers are attacked separately. `evaluator` is the real thing: the static allow-list refuses a kernel that
reaches for the harness (os, sys, frames, dunders) before it is imported. `watched` skips that check and the audit
hook (verdict v3, tests/harness/test_guard.py), so the runtime watch on the functions the harness relies on is
proven on its own. `raw` skips every in-process guard,
so that the structural defences behind them (fresh seeds, fixed output names, a judge process that never sees
candidate code, clock windows, every timed output checked, the census of the TPU lowering) are proven too.
"""

from pathlib import Path

import pytest

from maxkernel.harness.verdict.evaluate import Evaluator

pytestmark = pytest.mark.integration

KERNELS = Path(__file__).parent / "kernels"
V2 = KERNELS / "verdict_v2"
RMS, GEMM = "12p_RMSNorm", "8p_GEMM"


@pytest.fixture(scope="module")
def raw(evaluator):
    """The same pool, with both in-process guards off (the layers under test are the ones behind them)."""
    return Evaluator(evaluator.pool, static_check=False, watch=False, guard=False)


@pytest.fixture(scope="module")
def watched(evaluator):
    return Evaluator(evaluator.pool, static_check=False, guard=False)


def _refused(v, status: str, *words: str):
    assert v.status == status, v.model_dump_json(indent=1)[:3000]
    for w in words:
        assert w in v.reason, v.reason


# -- 1. forged results ---------------------------------------------------------------------------------------------
def test_a_patched_result_writer_gets_no_credit_for_its_forged_census(raw):
    """XLA computes the answer; the writer is patched to claim an honest census, a 4x speedup and no lowering."""
    _refused(raw.evaluate(RMS, V2 / "patch_writer.py"), "rejected", "does not lower for TPU")


@pytest.mark.parametrize("kernel", ["patch_writer.py", "forge_timing.py", "memo_compiled.py", "frame_flip_races.py",
                                    "garbage_after_n.py", "gil_burner.py"])
def test_the_static_check_refuses_every_in_process_attack_before_its_import(evaluator, kernel):
    v = evaluator.evaluate(RMS, V2 / kernel)
    _refused(v, "rejected", "line ")
    assert v.stage == "static" and v.kernel is None and not v.integrity


@pytest.mark.parametrize("kernel,name", [("patch_writer.py", "__main__._write"),
                                         ("forge_timing.py", "candidate_job._time"),
                                         ("memo_compiled.py", "Compiled.__call__")])
def test_the_watch_catches_what_the_kernel_rebinds(watched, kernel, name):
    v = watched.evaluate(RMS, V2 / kernel)
    _refused(v, "rejected", "replaced functions the harness relies on", name)


# -- 3. timing ---------------------------------------------------------------------------------------------------
def test_outputs_of_every_timed_repetition_are_checked(raw):
    """Correct on the checked calls, zeros from the fourth call on: the timed repetitions give it away."""
    v = raw.evaluate(RMS, V2 / "garbage_after_n.py")
    _refused(v, "incorrect", "timed repetition")
    assert v.correctness.timed and not any(t.ok for t in v.correctness.timed)
    assert all(s.ok for s in v.correctness.per_seed)  # the checked calls themselves were right


def test_a_memoised_kernel_never_answers_a_timed_call_from_its_memo(raw):
    """Memoised on the identity of its input buffers: v2 timed the checked buffers again, which the memo answered in
    microseconds (then rejected only as an implausible speedup). Each timed call now runs on an input set of its own,
    handed over when the timing starts, and is compared with the judge's reference: the memo buys nothing."""
    v = raw.evaluate(RMS, V2 / "memo_compiled.py")
    assert v.status == "correct", v.reason
    assert v.correctness.timed and len(v.correctness.timed) == len(v.kernel.samples_ms)
    assert all(t.ok and t.checked.startswith("fresh inputs") for t in v.correctness.timed)
    assert sorted(t.input for t in v.correctness.timed) == list(range(len(v.correctness.timed)))


def test_samples_forged_inside_the_clock_window_are_rejected(raw):
    v = raw.evaluate(RMS, V2 / "forge_timing.py")
    _refused(v, "rejected", "the timing was forged")


def test_a_thread_started_by_the_kernel_never_runs_while_the_baseline_is_timed(raw, monkeypatch):
    """The baseline is timed in the judge's process, and only once the candidate's process (and so the burner's
    thread, which takes the interpreter lock for whole switch intervals) is gone: the judge is told to time only
    after the candidate's worker has exited. Asserted on the mechanism, not on timings a loaded machine blurs."""
    from maxkernel.harness.verdict.judge_pair import JudgePair

    seen = []
    release = JudgePair.release_judge

    def spy(self, *, time_it, lowered):
        seen.append((time_it, self.workers["candidate"].proc.poll()))
        return release(self, time_it=time_it, lowered=lowered)

    monkeypatch.setattr(JudgePair, "release_judge", spy)
    burner = raw.evaluate(RMS, V2 / "gil_burner.py")
    assert burner.ok, burner.reason
    timed = [code for time_it, code in seen if time_it]
    assert timed and all(code is not None for code in timed), seen  # the candidate had exited before the judge timed
    assert burner.baseline and burner.baseline.samples_ms  # the judge's samples, the only ones the verdict reads


# -- 4. input lookup ---------------------------------------------------------------------------------------------
def test_answers_precomputed_for_predictable_seeds_fail_on_fresh_ones(evaluator):
    kernel = V2 / "lookup_default_seeds.py"
    replay = evaluator.evaluate(RMS, kernel, seeds=[0, 1, 2], exact_seeds=True)
    # Where the seeds can be guessed (a replay), the answers could be looked up; but the check size (and its seed)
    # and the timed calls' sets are drawn fresh even when the checked seeds are replayed, and the lookup table
    # holds no answer of the check size's shape.
    assert replay.correctness.seeds == [0, 1, 2] and replay.correctness.seeds_drawn == "replayed"
    assert replay.status != "correct" and "at the check size" in replay.reason, replay.reason
    fresh = evaluator.evaluate(RMS, kernel)
    assert fresh.status in ("incorrect", "rejected"), fresh.reason  # the check size (a shape it has no answers of)
    assert fresh.correctness.seeds_drawn == "fresh" and not set(fresh.correctness.seeds) & {0, 1, 2}


def test_seeds_are_drawn_fresh_for_every_evaluation_and_recorded(evaluator):
    a = evaluator.evaluate(RMS, KERNELS / "rmsnorm_rows.py", reps=0)
    b = evaluator.evaluate(RMS, KERNELS / "rmsnorm_rows.py", reps=0)
    assert a.ok and b.ok
    assert len(a.correctness.seeds) == 3 and a.correctness.seeds != b.correctness.seeds
    assert sorted(s % 3 for s in a.correctness.seeds) == [0, 1, 2]  # every input distribution, every time


# -- 5 and 9. the census ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("task,kernel,words", [
    (GEMM, "when_never_gemm.py", "outside pallas_call come to 100%"),
    (GEMM, "ragged_dot_xla.py", "ragged_dot"),
    (RMS, "dead_pallas_gemm.py", "reaches an output"),
    (RMS, "token_pallas.py", "XLA outside pallas_call does"),
])
def test_census_dodges_are_rejected(evaluator, task, kernel, words):
    v = evaluator.evaluate(task, V2 / kernel)
    _refused(v, "rejected", words)
    assert v.integrity["census_source"] == "tpu_lowering"


# -- 6. precision ------------------------------------------------------------------------------------------------
def test_an_int8_gemm_fails_on_the_calibrated_frobenius_bound(evaluator):
    v = evaluator.evaluate(GEMM, V2 / "int8_gemm.py")
    _refused(v, "incorrect", "relative Frobenius error")
    c = v.correctness
    # On normal inputs (every evaluation has one such seed) the old max-normalised measure lets it pass.
    assert any(s.max_rel_err < c.tolerance and s.fro_err > c.fro_tolerance for s in c.per_seed), c.per_seed


# -- 7. outputs that are not arrays --------------------------------------------------------------------------------
def test_a_pytree_object_as_output_is_rejected_with_its_type(evaluator, raw):
    _refused(evaluator.evaluate(RMS, V2 / "pytree_output.py"), "rejected", "register_pytree_node_class")
    v = raw.evaluate(RMS, V2 / "pytree_output.py")  # the judge's own check, behind the static one
    _refused(v, "rejected", "Boxed", "not a flat tuple of arrays")
    assert v.stage == "outputs"


# -- 8. the harness's own state ------------------------------------------------------------------------------------
def test_the_race_setting_is_frozen_before_the_import(raw):
    """The kernel walks the stack and switches race detection off in the job: too late, it was already read."""
    _refused(raw.evaluate(RMS, V2 / "frame_flip_races.py"), "incorrect", "data race")


# -- honest kernels and the record --------------------------------------------------------------------------------
@pytest.mark.parametrize("task,kernel", [(GEMM, V2 / "library_matmul.py"), ("1p_Flash_Attention", V2 / "library_flash.py"),
                                         (RMS, KERNELS / "rmsnorm_rows.py")])
def test_honest_and_library_kernels_stay_correct_and_the_verdict_records_its_evidence(evaluator, task, kernel):
    v = evaluator.evaluate(task, kernel)
    assert v.ok, v.model_dump_json(indent=1)[:3000]
    c = v.correctness
    assert len(c.seeds) == 3 and c.seeds_drawn == "fresh"
    assert c.max_fro_err is not None and c.fro_tolerance is not None and c.baseline_errors
    assert c.max_fro_err <= c.fro_tolerance and c.max_rel_err <= c.tolerance
    assert c.timed and all(t.ok for t in c.timed) and len(c.timed) == len(v.kernel.samples_ms)
    assert v.integrity["census_source"] == "tpu_lowering" and v.integrity["lowering"]["pallas_calls"] >= 1
    assert 0 <= v.integrity["pallas_share"] <= v.integrity["pallas_share_max"] <= 1
    assert v.integrity["pallas_share_max"] > 0.5


def test_a_kernel_the_interpreter_cannot_run_but_the_chip_compiles_is_unverifiable_not_an_error(evaluator):
    """jax's own splash attention under vmap: the interpreter's grid randomisation fails; v5e compiles it."""
    v = evaluator.evaluate("1p_Flash_Attention", V2 / "library_splash_vmap.py")
    _refused(v, "unverifiable_on_cpu", "safe_zip", "compiles for v5e")
