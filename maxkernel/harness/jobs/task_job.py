"""Sandbox job over a folder task's own code, for a process that must never run it (the MCP server): its declared
facts (CONFIG, SIZES, shapes and FLOPs at every size, ...), or the verdict's second size drawn over it. The parent
side is task_facts.py; nothing this job returns is ever executed there."""

from __future__ import annotations

import json
import random
from pathlib import Path

__all__ = ["run", "facts_of"]

_DECLARED = ("CONFIG", "CONFIGS", "SIZES", "FITS_CHIPS", "PARALLEL_DIMS", "TOLERANCE")


# -- the job (runs in the sandbox, over the task folder copied into its scratch as task/) --------------------------
def run(job: dict, scratch: Path) -> dict:
    mode = job.get("mode")
    if mode == "facts":
        return {"status": "ok", "facts": facts_of(job["task"])}
    if mode == "draw":
        from maxkernel.harness.verdict.checksize import draw
        from maxkernel.tasks import load_task

        check = draw(load_task(job["task"]), job["size"], float(job["budget"]), random.Random(int(job["seed"])))
        return {"status": "ok", "check": check}
    return {"status": "error", "stage": "job", "error": f"unknown task-job mode {mode!r}"}


def _plain(value):
    """JSON's own types, or a string for anything else (a dtype object in CONFIG)."""
    return json.loads(json.dumps(value, default=str))


def facts_of(spec: str) -> dict:
    import inspect

    from maxkernel.tasks import load_task

    task = load_task(spec)
    module = task.module
    declared = {k: _plain(getattr(module, k)) for k in _DECLARED if hasattr(module, k)}
    shapes, flops = {}, {}
    for size in task.sizes:
        try:
            ins, outs = task.structs(size)
        except Exception as exc:  # noqa: BLE001  (a size the task cannot build: the parent reports it when asked)
            shapes[size] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        else:
            shapes[size] = {"inputs": [[list(x.shape), str(x.dtype)] for x in ins],
                            "outputs": [[list(x.shape), str(x.dtype)] for x in outs]}
        flops[size] = task.flops(size)
    dtype = task.default_dtype
    return {"declared": declared, "seedable": task.seedable,
            "default_dtype": None if dtype is None else str(getattr(dtype, "__name__", dtype)),
            "has_flops": callable(getattr(module, "get_flops", None)), "shapes": shapes, "flops": flops,
            "signature": str(inspect.signature(module.workload))}
