"""What the estimate's parent side and its two jobs (`jobs/estimate_job.py`, `jobs/estimate_compile_job.py`) must
agree on, kept here so the parent never imports a job body: the progress files each job appends to, the task's
integer dims at a size, and the installed libtpu's version."""

from __future__ import annotations

__all__ = ["PLAN_PROGRESS_FILE", "PROFILE_PROGRESS_FILE", "libtpu_version", "task_dims"]

PLAN_PROGRESS_FILE = "estimate.jsonl"  # the planning job's progress: one line per size planned and lowered
PROFILE_PROGRESS_FILE = "profile.jsonl"  # the profiling job's progress: one line per lowering profiled


def task_dims(task, size: str) -> dict:
    """The task's integer parameters at `size` (CONFIG, overridden by SIZES[size] for a named size)."""
    dims = {**task.config, **(getattr(task.module, "SIZES", {}) or {}).get(size, {})} if size != "full" else task.config
    return {k: v for k, v in dims.items() if isinstance(v, int) and not isinstance(v, bool)}


def libtpu_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("libtpu")
    except Exception:  # noqa: BLE001
        return None
