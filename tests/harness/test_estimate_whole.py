"""XLA's program that no dim shrinks under the profiling budget is profiled whole at full size (the planning job
lowers it there; it starts libtpu for the compile-only device, so this is not the unit tier)."""

import json

import pytest

from maxkernel.harness.jobs import estimate_job as ej

from tests.harness.test_estimate_job import BUDGET

pytestmark = pytest.mark.integration


def test_a_program_with_no_dim_to_shrink_is_profiled_whole_and_says_which_dims_it_has(tmp_path):
    """17p-like: every dim under 2048 and none named parallel. XLA's program is then profiled whole at full size
    (rw_dit_attention's baseline, whose one long dim is contracted, profiled whole in 31 s), and the plan keeps the
    reason, listing the dims, so the user sees what to name with --parallel instead of a bare "no parallel
    dimension". A kernel that cannot be shrunk is priced in parts instead (test_estimate_split)."""
    (tmp_path / "t.py").write_text("import jax.numpy as jnp\n\n\ndef tri(a, b):\n"
                                   "    return jnp.einsum('ijc,kjc->ikc', a, b)\n")
    from maxkernel.tasknew.program import program_task

    task, _ = program_task(f"{tmp_path / 't.py'}:tri", ["bf16[1536,1536,128]", "bf16[1536,1536,128]"],
                           tmp_path / "programs")
    job = {"task": str(task.path), "kernel": None, "chip": "v5e", "size": "full", "dims_order": [],
           "budget": {**BUDGET, "full_bytes": 4 * 1536 * 1536 * 128 * 2}}
    out = ej.run(job, tmp_path)
    assert out["status"] == "ok", out
    lines = [json.loads(ln) for ln in (tmp_path / ej.PROGRESS_FILE).read_text().splitlines()]
    plan = next(ln["plan"] for ln in lines if "plan" in ln)
    assert "no other dim is 2048 or more wide" in plan["whole"] and "D1536=1536" in plan["whole"], plan["whole"]
    lowered = [ln["lowered"] for ln in lines if "lowered" in ln]
    assert [p["x"] for p in lowered] == [1.0] and lowered[0]["dims"] == plan["full_dims"]
    assert (tmp_path / lowered[0]["file"]).read_text().count("1536x1536x128") >= 2  # the full size, lowered
