"""The planning job's glue point (the program around the kernels, for its sorts) is an extra: its failure is named."""

import json
import shutil

import pytest


@pytest.mark.slow
@pytest.mark.integration
def test_a_glue_whose_lowering_raises_is_skipped_and_named_not_the_estimate(tmp_path, monkeypatch):
    """The planning job lowers the program around the kernels as an extra point when the kernel sorts outside its
    pallas_calls (the lightning indexer's top-k): a lowering that raises there is named and skipped; the sizes are
    lowered as ever, and the estimate goes on."""
    from _extras import need_module

    need_module("libtpu", extra="tpu")
    from maxkernel.harness.estimate import estimator as es
    from maxkernel.harness.jobs import estimate_job as ej
    from maxkernel.settings import get_settings
    from maxkernel.tasks import load_task

    task = load_task("rw_lightning_indexer")
    spec, files = task.for_job()
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    shutil.copy(task.path / "kernel.py", tmp_path / "kernel.py")
    s = get_settings()
    job = {"kind": "estimate", "task": spec, "kernel": "kernel.py", "chip": "v5e", "size": "smoke@decode",
           "tunables": {}, "dims_order": es._dims_order(task, True), "xla_dims_order": es._dims_order(task, False),
           "budget": {"flops": s.estimate_max_gflop * 1e9, "bytes": s.estimate_max_mb * 2**20,
                      "tiles": es.KERNEL_TILES, "min_share": es.KERNEL_MIN_SHARE, "full_bytes": 0},
           "guard": False, "in_parts": False}

    def broken(*_a, **_k):
        raise RuntimeError("an equation the evaluator cannot bind")

    monkeypatch.setattr(ej, "glue_lowering", broken)
    assert ej.run(job, tmp_path)["status"] == "ok"
    lines = [json.loads(ln) for ln in (tmp_path / ej.PROGRESS_FILE).read_text().splitlines()]
    skipped = [ln["glue_skipped"] for ln in lines if "glue_skipped" in ln]
    assert len(skipped) == 1 and "cannot bind" in skipped[0]
    lowered = [ln["lowered"] for ln in lines if "lowered" in ln]
    assert lowered and not any(p.get("glue") for p in lowered)
