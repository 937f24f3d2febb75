"""The VMEM footprint behind an out-of-VMEM hint: every block and scratch buffer of the traced program, named as
the kernel names them, with its buffer count and tile padding."""

from __future__ import annotations

import jax
import pytest

from maxkernel import chips
from maxkernel.evals.mistakes import MISTAKES, apply, base_source
from maxkernel.harness.jobs.candidate_job import load_kernel
from maxkernel.harness.hints.vmem_footprint import _padded_bytes, buffers, describe
from maxkernel.tasks import load_task

pytestmark = pytest.mark.unit


def _traced(source: str, task: str, tmp_path):
    path = tmp_path / "kernel.py"
    path.write_text(source)
    structs = jax.eval_shape(lambda: load_task(task).create_inputs(size="full", seed=0))
    with chips.trace_context(chips.get("v5e")):
        return jax.make_jaxpr(load_kernel(path).workload)(*structs)


def test_the_overflowing_rmsnorm_names_its_row_blocks(tmp_path):
    mistake = next(m for m in MISTAKES if m.family == "vmem_overflow")
    found = buffers(_traced(apply(mistake, base_source(mistake)), mistake.task, tmp_path))
    assert [(b.name, b.kind, b.shape, b.copies) for b in found][:2] == [
        ("x_ref", "input", (1024, 8192), 2), ("o_ref", "output", (1024, 8192), 2)]
    assert found[0].total == 2 * 1024 * 8192 * 2
    text = describe(found, needed=80 << 20)
    assert text.startswith("buffers 64.5 MiB") and "Shrink x_ref" in text and "15.5 MiB" in text


def test_scratch_counts_once_and_semaphores_and_hbm_operands_not_at_all(tmp_path):
    mistake = next(m for m in MISTAKES if m.base)
    found = {b.name: b for b in buffers(_traced(base_source(mistake), mistake.task, tmp_path))}
    assert set(found) == {"x_vmem", "scale_ref", "o_ref"}  # x_hbm stays in HBM, sem is a semaphore
    assert found["x_vmem"].kind == "scratch" and found["x_vmem"].copies == 1


def test_tiles_pad_rows_by_dtype_and_lanes_to_128():
    assert _padded_bytes((1, 8192), 2) == 16 * 8192 * 2  # bf16 packs 16 rows a tile
    assert _padded_bytes((1, 100), 4) == 8 * 128 * 4
    assert _padded_bytes((3, 5, 256), 1) == 3 * 32 * 256
