"""Outputs against their references: each error judged, and said, against its own output's bound."""

import numpy as np
import pytest


@pytest.mark.unit
def test_the_worst_error_is_said_beside_its_own_outputs_bound(tmp_path):
    """rw_rglru_scan returns y in bf16 (tolerance 0.02) and the final state in f32 (0.001): a correct kernel read
    "worst error 0.0033 (tolerance 0.001)", y's error beside the state's bound, which reads as a failure (and a
    record holding it fails the suite's max_rel_err <= tolerance)."""
    from types import SimpleNamespace

    import ml_dtypes

    from maxkernel.harness.verdict.arrays import save_arrays
    from maxkernel.harness.verdict.evaluate import Evaluator

    ref_y, ref_h = np.ones((8, 128)), np.ones((4, 128))
    y, h = ref_y.copy(), ref_h.copy()
    y[0, 0], h[0, 0] = 1 + 2**-7, 1.0009  # y off by one bf16 step (0.0078 of its max), h by 0.0009
    save_arrays(tmp_path / "out_0.npz", [y.astype(ml_dtypes.bfloat16), h.astype(np.float32)])
    res = SimpleNamespace(scratch=tmp_path)
    got = Evaluator._seed_check(res, "out_0.npz", "out_0.npz", [ref_y, ref_h], 7, ["bfloat16", "float32"],
                                [0.02, 0.001], [None, None])
    assert got.ok and got.max_rel_err == 2**-7
    assert got.tolerance == 0.02 and got.max_rel_err <= got.tolerance
