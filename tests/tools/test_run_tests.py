"""run_tests on real kernels: passes a good one, and says where a broken one goes wrong."""

from pathlib import Path

import pytest

from maxkernel.tools.run_tests import run_tests

ROOT = Path(__file__).resolve().parents[1]
BROKEN = Path(__file__).parent / "kernels_runtime"
pytestmark = pytest.mark.integration


def test_good_kernel_passes():
    r = run_tests("12p_RMSNorm", str(ROOT / "harness/kernels/rmsnorm_rows.py"))
    assert r.ok and r.status == "correct" and r.races is False
    assert r.max_rel_err < r.tolerance and len(r.seeds) == 3 and not set(r.seeds) & {0, 1, 2}  # drawn fresh
    assert r.summary.startswith("PASS")


def test_out_of_bounds_index_map_names_input_and_step():
    r = run_tests("12p_RMSNorm", str(BROKEN / "oob_index_map.py"))
    assert not r.ok and r.status == "error" and r.stage == "run"
    assert "Out-of-bounds block index" in r.summary and "x_ref" in r.summary and "iteration (3,)" in r.summary


def test_missing_accumulator_init_shows_nan_and_block():
    r = run_tests("8p_GEMM", str(BROKEN / "missing_init.py"))
    assert not r.ok and r.status == "incorrect"
    assert r.mismatch and r.mismatch[0].block == [0, 0]
    assert "NaN" in r.summary and "initialised" in r.summary


def test_dma_race_is_reported_as_a_race():
    r = run_tests("12p_RMSNorm", str(BROKEN / "dma_race.py"))
    assert not r.ok and r.races is True
    assert "data race" in r.summary


@pytest.mark.unit
def test_a_task_with_configs_is_tested_at_each_and_says_so():
    """A PASS on rw_w8a8_int8_matmul named no config: a user could not tell the decode config had run too."""
    from maxkernel.harness.verdict.result import Correctness, Verdict
    from maxkernel.tools.run_tests import report_from_verdict

    v = Verdict(task="rw_w8a8_int8_matmul", kernel_file="k.py", size="smoke", status="correct",
                correctness=Correctness(max_rel_err=0.003, tolerance=0.02, seeds=[5, 6, 7]),
                configs={"prefill": {"size": "smoke", "status": "correct"},
                         "decode": {"size": "smoke@decode", "status": "correct"}})
    r = report_from_verdict(v)
    assert r.ok and r.summary.startswith("configs prefill (smoke: correct), decode (smoke@decode: correct). PASS")


@pytest.mark.unit
def test_a_pass_says_which_smaller_blocks_the_verdict_also_ran():
    """A PASS that ran the small-blocks check says with which blocks: the debugger learns the kernel's multi-step
    path was exercised (and one that could not run it says nothing it did not do)."""
    from maxkernel.harness.verdict.result import Correctness, Verdict
    from maxkernel.tools.run_tests import report_from_verdict

    small = {"config": {"block_q": 128, "block_k": 128}, "steps": 16, "default_steps": 4, "ok": True}
    v = Verdict(task="1p_Flash_Attention", kernel_file="k.py", size="smoke", status="correct",
                correctness=Correctness(max_rel_err=0.003, tolerance=0.02, seeds=[5], small_blocks=small))
    assert report_from_verdict(v).summary.endswith(
        "Also right with its smallest declared tunables (block_k=128, block_q=128: 16 grid steps where the defaults "
        "take 4).")
    skipped = v.model_copy(update={"correctness": Correctness(max_rel_err=0.003, tolerance=0.02, seeds=[5],
                                                              small_blocks={"skipped": "block_q=128: 4 grid steps"})})
    assert "smallest declared" not in report_from_verdict(skipped).summary


@pytest.mark.unit
def test_a_test_never_prices_the_kernel(monkeypatch):
    """`maxkernel test` sat ten minutes in libtpu's profiled compiles of a kernel whose strict run takes 20 s: the
    evaluator's settings turn the TPU estimate on, and the test report never shows one."""
    from maxkernel.harness.verdict.result import Correctness, Verdict
    from maxkernel.tools import run_tests as rt

    asked = {}

    class Evaluator:
        def evaluate(self, task, kernel, **kw):
            asked.update(kw)
            return Verdict(task=task, kernel_file=kernel, size=kw["size"], status="correct",
                           correctness=Correctness(max_rel_err=0.001, tolerance=0.02, seeds=[4, 5, 6]))

    monkeypatch.setattr(rt, "shared_evaluator", lambda: Evaluator())
    r = rt.run_tests("12p_RMSNorm", "k.py")
    assert r.ok and asked["estimate"] is False and asked["detect_races"] is True
