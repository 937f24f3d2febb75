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
