"""benchmarks/estimate_vs_device.py's arithmetic (the figures the estimate is judged by) and its refusals; the
estimates themselves are the estimator's tests."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "estimate_vs_device.py"
spec = importlib.util.spec_from_file_location("estimate_vs_device", SCRIPT)
evd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(evd)

pytestmark = pytest.mark.unit


def test_rank_correlation_sees_order_not_scale():
    assert evd.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert evd.spearman([1, 2, 3, 4], [0.4, 0.3, 0.2, 0.1]) == pytest.approx(-1.0)
    assert evd.spearman([1, 2, 2, 3], [1, 2, 2, 3]) == pytest.approx(1.0)  # ties share a rank
    assert evd.spearman([1, 2], [1, 2]) is None  # too few to say


def test_errors_are_over_rows_with_both_figures_and_symmetric_in_the_ratio():
    rows = [{"chip": "v5e", "task": "a", "estimated_ms": 2.0, "measured_ms": 1.0, "decided_by": "static profile"},
            {"chip": "v5e", "task": "b", "estimated_ms": 1.0, "measured_ms": 2.0, "decided_by": "roofline floor",
             "under_priced": True},
            {"chip": "v5e", "task": "c", "estimated_ms": 3.0, "measured_ms": 3.0, "decided_by": "static profile"},
            {"chip": "v5e", "task": "d", "estimated_ms": None, "measured_ms": 1.0}]
    s = evd.summary(rows)["v5e"]
    assert s["all"]["n"] == 3 and s["all"]["worst_abs_error"] == pytest.approx(1.0)
    assert s["all"]["within_2x"] == 1.0 and s["all"]["within_1.5x"] == pytest.approx(1 / 3)
    assert s["by_decided_by"]["static profile"]["n"] == 2 and s["under_priced"]["n"] == 1
    assert s["not_estimated"] == ["d"]


def test_without_a_tpu_or_timings_or_with_bad_timings_it_exits_2(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text('[{"task": "12p_RMSNorm"}]')
    for args, says in (([], "no TPU attached"), (["--measured", str(bad)], "not a list")):
        r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and says in r.stderr, r.stderr
