"""The parent's side of harness/jobs/task_job.py: a folder task whose code may not run in this process (the MCP server),
known by the facts a sandboxed job read (`described`, what `Task.module` is then) and its verdict's second size
drawn in a job (`draw_remote`). Nothing here executes anything the job returned."""

from __future__ import annotations

import copy
from types import SimpleNamespace

__all__ = ["described", "draw_remote", "Described", "FACTS_TIMEOUT_S"]

FACTS_TIMEOUT_S = 120.0
_FACTS: dict = {}  # (folder, digest) -> facts: a task's files do not change under one digest


def _run_job(task, job: dict, timeout: float):
    from maxkernel.harness.sandbox.pool import run_job
    from maxkernel.tasks import TaskError

    spec, files = task.for_job()
    res = run_job({"kind": "task", "task": spec, **job}, files, timeout)
    if res.status != "ok" or not res.result or res.result.get("status") != "ok":
        detail = (res.result or {}).get("error") or res.stderr_tail.strip().splitlines()[-1:] or [res.status]
        raise TaskError(f"task {task.name} could not be read in its sandboxed job ({res.status}): "
                        f"{detail if isinstance(detail, str) else detail[0]}"[:600])
    return res.result


class Described(SimpleNamespace):
    """A folder task's module as a process that never imports it sees it: the names it declared, and `structs` and
    `get_flops` from what the job read. Its create_inputs and workload refuse: they run only in a sandboxed job."""

    def __init__(self, task_name: str, facts: dict):
        super().__init__(**copy.deepcopy(facts["declared"]))
        self._name, self._facts = task_name, facts
        self.SEEDABLE, self.DEFAULT_DTYPE = facts["seedable"], facts["default_dtype"]
        if facts["has_flops"]:
            self.get_flops = self._flops

    def _refuse(self, *args, **kwargs):
        from maxkernel.tasks import TaskError

        raise TaskError(f"task {self._name}: its code runs only in sandboxed jobs in this process")

    create_inputs = workload = _refuse

    def _flops(self, size: str = "full"):
        return self._facts["flops"].get(size)

    def structs(self, size: str) -> tuple[list, list]:
        import jax
        import jax.numpy as jnp

        from maxkernel.tasks import TaskError

        row = self._facts["shapes"].get(size)
        if row is None:
            raise TaskError(f"task {self._name} has no size {size!r}")
        if "error" in row:
            raise TaskError(f"task {self._name} does not build at size {size}: {row['error']}")
        return tuple([jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype)) for shape, dtype in row[kind]]
                     for kind in ("inputs", "outputs"))


def described(task) -> Described:
    """The task's facts, read once per content digest by a sandboxed job."""
    key = (str(task.path), task.digest)
    if key not in _FACTS:
        _FACTS[key] = _run_job(task, {"mode": "facts"}, FACTS_TIMEOUT_S)["facts"]
    return Described(task.name, _FACTS[key])


def draw_remote(task, size: str) -> dict | None:
    """checksize.draw over a described task, run in a job where its code may run, seeded by this process."""
    import secrets

    from maxkernel.harness.verdict.checksize import WORK_BUDGET

    if size.startswith("full"):
        return None
    job = {"mode": "draw", "size": size, "budget": WORK_BUDGET, "seed": secrets.randbits(63)}
    return _run_job(task, job, FACTS_TIMEOUT_S)["check"]
