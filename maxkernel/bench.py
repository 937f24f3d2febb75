"""`maxkernel bench`: list the suite and time its XLA baselines (and shipped reference kernels) in-process."""

from __future__ import annotations

import time

import jaxbench
from maxkernel.harness.verdict.result import Timing
from maxkernel.tasks import Task, load_task

__all__ = ["list_tasks", "time_task", "time_fn"]


def list_tasks(suite: str = "jaxbench") -> list[dict]:
    """One row per task of `suite` (jaxbench, realworld or all): name, suite, tier, source, whether it ships a
    reference kernel, the TPU chips whose HBM its full size fits, its named configs and its model."""
    rows = []
    for name in jaxbench.task_names(suite):
        task = load_task(name)
        rows.append({"name": name, "suite": task.suite, "tier": task.tier, "source": task.source,
                     "reference_kernel": task.reference_kernel is not None, "fits_chips": list(task.fits_chips),
                     "configs": task.configs, "model": task.config.get("model", "")})
    return rows


def time_fn(fn, args, *, reps: int = 20, budget_s: float = 2.0) -> Timing:
    """Median/IQR wall time of fn(*args) after a warm-up, forcing outputs inside the timed region."""
    import jax

    jax.block_until_ready(fn(*args))
    samples = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < reps and (time.perf_counter() < deadline or len(samples) < 3):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        samples.append((time.perf_counter() - t0) * 1e3)
    return Timing.of(samples)


def time_task(task: Task, size: str, *, reps: int = 20, budget_s: float = 2.0, with_reference: bool = True) -> dict:
    """Time the task's XLA baseline (and its reference kernel, interpreted on CPU) on this backend."""
    import jax

    from maxkernel import chips
    from maxkernel.harness.jobs.candidate_job import interpret_context, load_kernel

    backend = jax.default_backend()
    chip = chips.detect()
    inputs = task.create_inputs(size=size, seed=0)
    flops = task.flops(size) or 0
    nbytes = sum(x.size * x.dtype.itemsize for x in inputs)
    out = jax.eval_shape(task.module.workload, *inputs)
    nbytes += sum(o.size * o.dtype.itemsize for o in jax.tree_util.tree_leaves(out))
    bound_s = chips.roofline_seconds(chip, flops, nbytes)

    def row(timing: Timing) -> dict:
        sec = timing.median_ms / 1e3
        return {"median_ms": round(timing.median_ms, 4), "iqr_ms": round(timing.iqr_ms, 4),
                "tflops": round(flops / sec / 1e12, 6) if sec > 0 else None,
                "roofline_fraction": round(bound_s / sec, 6) if sec > 0 and bound_s else None}

    result = {"name": task.name, "size": size, "backend": backend, "chip": chip.name, "flops": flops,
              "bytes": nbytes, **row(time_fn(jax.jit(task.module.workload), inputs, reps=reps, budget_s=budget_s))}
    if with_reference and task.reference_kernel is not None:
        module = load_kernel(task.reference_kernel)
        with interpret_context(backend):
            fn = jax.jit(module.workload).trace(*inputs).lower().compile()
        ref = row(time_fn(fn, inputs, reps=reps, budget_s=budget_s))
        if backend == "cpu":
            ref["label"] = "Pallas TPU interpreter on CPU: not kernel performance"
        result["reference_kernel"] = ref
    return result
