"""A bfloat16 port is judged against the original within the fixed tolerance, or twice the original's own rounding
error (its run on the same inputs widened to float32) where that is larger; never looser for float32 or integers."""

import ml_dtypes
import numpy as np
import pytest

from maxkernel.port.check import OWN_FACTOR, _compare, own_errors

pytestmark = pytest.mark.unit


def _bf16(x):
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16)


def test_the_originals_own_error_is_its_low_precision_run_against_the_widened_one():
    wide = np.linspace(-10, 10, 4096, dtype=np.float32)
    own = own_errors([_bf16(wide), np.arange(4, dtype=np.int32)], [wide, np.arange(4, dtype=np.int32)])
    assert 0 < own[0] < 2 ** -8 and own[1] == 0.0
    assert own_errors([_bf16(wide)], None) is None


def test_a_port_within_twice_the_originals_own_error_passes_and_beyond_it_fails():
    ref = np.full(1024, 10.0, dtype=np.float32)
    original = _bf16(ref)
    own = [0.015]  # the original's own error: over half the fixed bfloat16 tolerance (0.02)
    near = _bf16(ref * (1 + 0.025))  # 0.025 of max|ref|: over 0.02, within 2 x 0.015
    far = _bf16(ref * (1 + 0.05))
    assert not _compare([original], [near])[0]  # the fixed tolerance alone refuses it
    ok, rows, _ = _compare([original], [near], own=own)
    assert ok and rows[0]["tolerance"] == pytest.approx(OWN_FACTOR * 0.015) and rows[0]["own_error"] == 0.015
    assert not _compare([original], [far], own=own)[0]


def test_float32_and_integer_outputs_keep_their_fixed_tolerance():
    ref = np.full(8, 10.0, dtype=np.float32)
    assert not _compare([ref], [ref * 1.01], own=own_errors([ref], [ref]))[0]
    ints = np.arange(8, dtype=np.int32)
    assert not _compare([ints], [ints + 1], own=[0.5])[0]
