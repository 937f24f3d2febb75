"""Sandbox job: compile one kernel for several chips and/or tunable configurations in one process."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from maxkernel import chips
from maxkernel.tasks import load_task
from maxkernel.harness.jobs.candidate_job import job_guard, load_kernel
from maxkernel.harness.jobs import compile_job as _compile_job

__all__ = ["run", "estimate_vmem", "PROGRESS_FILE"]

PROGRESS_FILE = "progress.jsonl"  # one result per line, written as each compile finishes
# libtpu needs minutes to reject a block far beyond VMEM, so such configurations are pruned by estimate first.
_ESTIMATE_MARGIN = 1.5


def estimate_vmem(fn, structs, chip) -> tuple[int, int] | None:
    """(estimated VMEM bytes, the limit that applies) of the pallas_calls `fn` makes; None if unknown.

    Blocked operands are counted twice (the pipeline double-buffers them), plus VMEM scratch.
    """
    import jax

    if not chip.is_tpu:
        return None
    with chips.trace_context(chip):
        jaxpr = jax.jit(fn).trace(*structs).jaxpr
    worst = None
    for eqn in _pallas_eqns(jaxpr.jaxpr):
        gm = eqn.params["grid_mapping"]
        total = 0
        for bm in gm.block_mappings:
            aval = bm.block_aval
            if "any" in str(getattr(aval, "memory_space", "")).lower():
                continue
            total += 2 * math.prod(aval.shape) * aval.dtype.itemsize
        body = eqn.params["jaxpr"]
        for var in body.invars[len(body.invars) - gm.num_scratch_operands:] if gm.num_scratch_operands else []:
            inner = getattr(var.aval, "inner_aval", var.aval)
            if "vmem" in str(var.aval).lower() and hasattr(inner, "shape"):
                total += math.prod(inner.shape) * inner.dtype.itemsize
        params = eqn.params.get("compiler_params") or {}
        params = params.get("mosaic_tpu", params) if isinstance(params, dict) else params
        limit = getattr(params, "vmem_limit_bytes", None) or chip.scoped_vmem_default_bytes or chip.vmem_bytes
        if worst is None or total / limit > worst[0] / worst[1]:
            worst = (total, limit)
    return worst


def _pallas_eqns(jaxpr):
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
            continue
        for value in eqn.params.values():
            for sub in (value if isinstance(value, (tuple, list)) else (value,)):
                inner = sub if hasattr(sub, "eqns") else getattr(sub, "jaxpr", None)
                if inner is not None and hasattr(inner, "eqns"):
                    yield from _pallas_eqns(inner)


def _prune_by_estimate(job: dict, config: dict, chip_name: str, scratch: Path) -> dict | None:
    try:
        chip = chips.get(chip_name)
        task = load_task(job["task"])
        import jax

        structs = jax.eval_shape(lambda: task.create_inputs(size=job.get("size", "full"), seed=0))
        module = load_kernel(scratch / job["kernel"], guard=job_guard(job, scratch))
        est = estimate_vmem(functools.partial(module.workload, **config), structs, chip)
    except Exception:  # noqa: BLE001  (the real compile below reports the error properly)
        return None
    if est is None or est[0] <= _ESTIMATE_MARGIN * est[1]:
        return None
    used, limit = est
    return {"ok": False, "chip": chip_name, "stage": "estimate", "vmem_bytes": used,
            "error": f"estimated VMEM {used / 2**20:.1f} MiB far exceeds the {limit / 2**20:.0f} MiB scoped limit "
                     f"on {chip_name} (blocks double-buffered plus scratch); not compiled",
            "hint": "use smaller blocks, or raise vmem_limit_bytes up to the chip's VMEM"}


def run(job: dict, scratch: Path) -> dict:
    """job: {task, kernel, size, chips: [names], configs: [tunables dicts]} -> {"results": [...]} in that order.

    Each result is _compile_job.run's dict plus "config"; a failure of one does not stop the others. Results
    are also appended to PROGRESS_FILE as they finish, so a caller that kills a stuck compile keeps the rest.
    """
    results = []
    progress = scratch / PROGRESS_FILE
    for config in job.get("configs") or [{}]:
        for chip in job["chips"]:
            one = {"task": job["task"], "kernel": job["kernel"], "chip": chip, "size": job.get("size", "full"),
                   "tunables": config, "guard": job.get("guard", True)}
            try:
                res = (_prune_by_estimate(job, config, chip, scratch) if config else None) or _compile_job.run(one, scratch)
            except Exception as exc:  # noqa: BLE001  (a usage error for one entry is reported, not fatal)
                res = {"ok": False, "chip": chip, "stage": "lower", "error": f"{type(exc).__name__}: {exc}"[:1500]}
            res["config"] = config
            results.append(res)
            with open(progress, "a") as f:
                f.write(json.dumps(res, default=str) + "\n")
    return {"status": "ok", "results": results}
