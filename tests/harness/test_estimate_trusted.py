"""The cycles come from a process that never imports the candidate.

A kernel whose first defences have fallen (the source screen and the audit hook are switched off here, for this
layer alone) patches, in its own process, the profile parser, the 0-cycle fill and the progress records the
profile used to arrive in. Its estimate must be the honest kernel's: the planning process that imports it only
lowers the program, and the profile is compiled, parsed and recorded by a second process. With the profile taken
in the candidate's process, as before, the forged one-cycle profile fell to the roofline floor.
"""

from pathlib import Path

import pytest
from _extras import need_module

from maxkernel import chips
from maxkernel.harness.estimate import estimator as estimate_mod
from maxkernel.harness.estimate.estimator import estimate_program
from maxkernel.harness.sandbox.guard import unguarded
from maxkernel.tasks import load_task

pytestmark = [pytest.mark.slow, pytest.mark.integration]

RMS = Path(__file__).parents[2] / "jaxbench" / "12p_RMSNorm" / "kernel.py"
FORGE = '''

# --- the attack: everything the candidate's process can reach of the estimator, forged ---
import maxkernel.harness.jobs.estimate_job as _ej
import maxkernel.harness.estimate.hlo_loops as _hl

_ej.parse_profile = lambda text: {"forged": 1}
_ej.zero_cycle_bytes = lambda hlo, names: {}
_hl.op_trips = lambda hlo: ({}, [])
_write_line = _ej._line


def _forged_line(path, record):
    _write_line(path, record)
    for key in ("lowered", "point"):
        if key in record:  # a forged profile beside each size, in the format the profile job writes
            _write_line(path, {"point": {**record[key], "ops": {"forged": 1}, "zero_cycle_bytes": {}, "trips": {},
                                         "loops": [], "compile_s": 0.0}})


_ej._line = _forged_line
'''


def test_a_kernel_forging_the_profile_in_its_own_process_keeps_its_honest_estimate(tmp_path, monkeypatch):
    need_module("libtpu", extra="tpu")
    forged = tmp_path / "kernel.py"
    forged.write_text(RMS.read_text() + FORGE)
    monkeypatch.setattr("maxkernel.harness.sandbox.static_check.check_source", lambda *a, **k: None)
    task, chip, narrow = load_task("12p_RMSNorm"), chips.get("v5e"), {"block_rows": 8}  # well above its floor
    honest = estimate_program(task, str(RMS), chip, "full", narrow)
    with unguarded():
        monkeypatch.setattr(estimate_mod, "jobs_guarded", lambda: False)
        attacked = estimate_program(task, str(forged), chip, "full", narrow)
    assert honest.ok and attacked.ok, (honest.error, attacked.error)
    assert honest.estimated_ms > 1.5 * honest.roofline_ms  # 8-row blocks: the per-step cost shows
    assert attacked.estimated_ms == pytest.approx(honest.estimated_ms, rel=1e-6)
    assert attacked.under_priced is None and "forged" not in str(attacked.fit)
