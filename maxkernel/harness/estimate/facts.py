"""What the estimate's parent side and its two jobs (`jobs/estimate_job.py`, `jobs/estimate_compile_job.py`) must
agree on, kept here so the parent never imports a job body: the progress files each job appends to, the task's
integer dims at a size, and the installed libtpu's version."""

from __future__ import annotations

__all__ = ["PLAN_PROGRESS_FILE", "PROFILE_PROGRESS_FILE", "libtpu_version", "task_dims", "task_params"]

PLAN_PROGRESS_FILE = "estimate.jsonl"  # the planning job's progress: one line per size planned and lowered
PROFILE_PROGRESS_FILE = "profile.jsonl"  # the profiling job's progress: one line per lowering profiled


def task_params(task, size: str) -> dict:
    """The task's parameters at `size`, resolved as its create_inputs resolves them: CONFIG, then SIZES[base] for a
    named base size, then for SIZE@CONFIG the config's overrides (CONFIGS[name]) and SIZES[size]."""
    sizes = getattr(task.module, "SIZES", {}) or {}
    base, _, name = size.partition("@")
    params = dict(task.config)
    if base != "full":
        params.update(sizes.get(base, {}))
    if name:
        params.update((getattr(task.module, "CONFIGS", {}) or {}).get(name, {}))
        params.update(sizes.get(size, {}))
    return params


def task_dims(task, size: str) -> dict:
    """The task's integer parameters at `size` (task_params: a config's overrides included, so full@decode is the
    decode config's dims, not CONFIG's)."""
    return {k: v for k, v in task_params(task, size).items() if isinstance(v, int) and not isinstance(v, bool)}


def libtpu_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("libtpu")
    except Exception:  # noqa: BLE001
        return None
