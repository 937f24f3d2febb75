"""Sandbox job: make the seeded inputs and the trusted reference outputs for a task (never sees a candidate)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["run"]


def run(job: dict, scratch: Path) -> dict:
    """job: {task, size, seeds}. Writes inputs_<seed>.npz and ref_<seed>.npz into `scratch`."""
    import jax
    import numpy as np

    from maxkernel.harness.arrays import save_arrays
    from maxkernel.harness.integrity import census
    from maxkernel.harness.numerics import reference_outputs
    from maxkernel.tasks import load_task

    task = load_task(job["task"])
    size = job["size"]
    meta = None
    for seed in job["seeds"]:
        inputs = task.create_inputs(size=size, seed=seed)
        save_arrays(scratch / f"inputs_{seed}.npz", [np.asarray(x) for x in inputs])
        save_arrays(scratch / f"ref_{seed}.npz", reference_outputs(task.module.workload, inputs))
        if meta is None:
            traced = jax.jit(task.module.workload).trace(*inputs)
            leaves = jax.tree_util.tree_leaves(traced.out_info)
            baseline_flops = census(traced.jaxpr).total_flops
            dtypes = [str(leaf.dtype) for leaf in leaves]
            in_bytes = sum(x.size * x.dtype.itemsize for x in inputs)
            out_bytes = sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in leaves)
            meta = {
                "out_dtypes": dtypes,
                "out_shapes": [list(leaf.shape) for leaf in leaves],
                "tolerances": [task.tolerance(d) for d in dtypes],
                "flops": task.flops(size) or baseline_flops,
                "baseline_flops": baseline_flops,
                "bytes": int(in_bytes + out_bytes),
                "config": task.config,
            }
    return {"status": "ok", "meta": meta, "seeds": list(job["seeds"])}
