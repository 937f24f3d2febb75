"""compile_pallas through the sandbox: every TPU chip the installed libtpu supports, and a clear failure."""

from pathlib import Path

import pytest

from maxkernel.tools.compile_pallas import TPU_CHIPS, compile_many, compile_pallas

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def test_reference_gemm_compiles_for_every_tpu_chip():
    results = compile_many("8p_GEMM", str(ROOT / "tests/harness/kernels/gemm_tiled.py"), list(TPU_CHIPS))
    assert [r.chip for r in results] == list(TPU_CHIPS)  # one result per chip: an empty list is no pass
    for r in results:
        assert r.ok, r.summary
        assert r.stage == "compile" and r.vmem_bytes and r.vmem_bytes < r.vmem_limit_bytes
        assert r.roofline_ms and r.roofline_ms > 0


def test_block_shape_violation_fails_with_hint():
    r = compile_pallas("8p_GEMM", str(ROOT / "tests/tools/kernels/bad_block_shape.py"), "v5e")
    assert not r.ok and r.hint and "FAILED" in r.summary


def test_unknown_chip_is_a_value_error():
    with pytest.raises(ValueError):
        compile_pallas("8p_GEMM", str(ROOT / "tests/harness/kernels/gemm_tiled.py"), "v9z")
