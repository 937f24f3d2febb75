"""Verdict v3: what is checked is what is priced. Each hostile kernel here was judged `correct` (and, where it
matters, estimated at its roofline floor) by verdict v2; each test proves the defence that now refuses it.

`raw` and `watched` turn in-process guards off (as in test_verdict_v2.py), so that the structural defences behind
them are proven on their own: a candidate process that got past the allow-list and the audit hooks.
"""

from pathlib import Path

import pytest

import jaxbench
from maxkernel.harness.verdict.evaluate import Evaluator

pytestmark = pytest.mark.integration

V3 = Path(__file__).parent / "kernels" / "verdict_v3"
RMS, GEMM = "12p_RMSNorm", "8p_GEMM"


@pytest.fixture(scope="module")
def raw(evaluator):
    return Evaluator(evaluator.pool, static_check=False, watch=False, guard=False)


@pytest.fixture(scope="module")
def watched(evaluator):
    return Evaluator(evaluator.pool, static_check=False, guard=False)


def test_a_kernel_honest_only_at_the_smoke_shape_fails_at_the_drawn_check_size(evaluator):
    v = evaluator.evaluate(RMS, V3 / "shape_branch_smoke.py", estimate=False)
    assert v.status == "incorrect" and "at the check size" in v.reason, v.reason
    assert all(s.ok for s in v.correctness.per_seed)  # right wherever it was checked before
    c = v.correctness
    assert c.check is not None and not c.check.ok and c.check.seed not in c.seeds
    assert c.check_size and c.check_size != {"batch": 2, "seq_len": 64, "emb_dim": 256}


def test_a_bfloat16_accumulator_fails_at_the_real_reduction_length(evaluator):
    """Passes the calibrated bound at the smoke size's K of 512; the check size runs K at 4096, where XLA's own
    error (the calibration) is taken again and the accumulator's has grown past 2.5x of it."""
    v = evaluator.evaluate(GEMM, V3 / "bf16_accumulator.py", estimate=False)
    assert v.status == "incorrect" and "at the check size" in v.reason and "Frobenius" in v.reason, v.reason
    assert all(s.ok for s in v.correctness.per_seed)
    assert v.correctness.check_size["K"] >= 4096


def test_honest_f32_accumulation_passes_at_the_check_size(evaluator):
    v = evaluator.evaluate(GEMM, jaxbench.task_dir(GEMM) / "kernel.py", estimate=False)
    assert v.status == "correct", v.reason
    assert v.correctness.check is not None and v.correctness.check.ok and v.correctness.check_size["K"] >= 4096


def test_the_lowering_handed_to_the_judge_must_be_the_program_that_ran(raw):
    """XLA computes the answer and the lowering is swapped for an honest Pallas program's (with every in-process
    guard off): the census of the lowering and the candidate's trace tell two stories."""
    v = raw.evaluate(RMS, V3 / "forged_lowering.py", estimate=False)
    assert v.status == "rejected" and v.stage == "integrity", v.reason
    assert "not the program that ran" in v.reason and "holds 0" in v.reason


def test_an_instance_level_memo_answers_fresh_inputs_wrong(watched):
    """The memo hides from the watch (instance attribute, class patch undone); v2 timed repetitions on the
    checked buffers, which it answered from its cache. Every timed call now runs on an input set of its own,
    handed over only when the timing starts, and is compared with the judge's reference."""
    v = watched.evaluate(RMS, V3 / "instance_memo.py", estimate=False)
    assert v.status == "incorrect" and "inputs it had not seen" in v.reason, v.reason
    assert v.correctness.timed and all(t.checked.startswith("fresh inputs") for t in v.correctness.timed)
    assert all(s.ok for s in v.correctness.per_seed)


@pytest.mark.slow
def test_a_kernel_that_runs_another_program_at_full_size_gets_no_estimate_and_no_rank(evaluator):
    """Honest and correct at every size the verdict runs; at full size a copy kernel that v2 estimated at its
    memory floor, ranked above the shipped GEMM. The priced program's fingerprint is not the checked one's."""
    v = evaluator.evaluate(GEMM, V3 / "shape_branch_small.py", estimate=True)
    assert v.status == "correct", v.reason
    assert "size_dependent_program" in v.flags
    assert v.estimate["ok"] is False and "not the program whose outputs were checked" in v.estimate["error"]
    rank, label = v.rank
    assert rank is None and label.startswith("not ranked")


def test_the_backend_is_the_judges_not_the_candidates_word(raw):
    v = raw.evaluate(RMS, V3 / "forged_backend.py", estimate=False)
    assert v.status == "rejected" and "says it ran on 'tpu'" in v.reason, v.reason
    assert v.backend == "cpu"
