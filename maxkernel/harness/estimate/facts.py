"""What the estimate's parent side and its two jobs (`jobs/estimate_job.py`, `jobs/estimate_compile_job.py`) must
agree on, kept here so the parent never imports a job body: the progress files each job appends to, the task's
integer dims at a size, and the installed libtpu's version."""

from __future__ import annotations

__all__ = ["PLAN_PROGRESS_FILE", "PROFILE_PROGRESS_FILE", "libtpu_version", "task_dims", "task_params",
           "int8_matmul_flops"]

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


_INT8 = frozenset({"int8", "uint8", "int4", "uint4"})


def int8_matmul_flops(closed) -> float:
    """FLOPs of the matmuls in a traced program whose two operands are 8-bit (or narrower) integers, which the MXU
    retires at its int8 rate: 2 x output elements x contracted extent, nested jaxprs walked, a scan's body times
    its length."""
    import math

    def walk(jaxpr, times: int) -> float:
        total = 0.0
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general" and all(str(v.aval.dtype) in _INT8 for v in eqn.invars[:2]):
                (contracted, _), _ = eqn.params["dimension_numbers"]
                k = math.prod(eqn.invars[0].aval.shape[d] for d in contracted)
                total += 2.0 * math.prod(eqn.outvars[0].aval.shape) * k * times
            trips = int(eqn.params.get("length") or 1) if eqn.primitive.name == "scan" else 1
            for value in eqn.params.values():
                inner = getattr(value, "jaxpr", value)
                if hasattr(inner, "eqns"):
                    total += walk(inner, times * trips)
        return total

    return walk(getattr(closed, "jaxpr", closed), 1)
