"""Sandbox job, the judge's side (never sees candidate code): inputs and references for the drawn seeds, the
baseline's own rounding error and its timing, and the census of the candidate's TPU lowering; it runs beside the
candidate's job and hands over through its scratch folder (harness/verdict/handoff.py)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["run"]


def run(job: dict, scratch: Path) -> dict:
    """The judge's job (below); a check size injected into the task's module is taken out again afterwards, so a
    persistent judge's next job sees the task as shipped (harness/verdict/judge_service.py)."""
    from maxkernel.harness.verdict.checksize import injected
    from maxkernel.tasks import load_task

    task = load_task(job["task"])
    check = job.get("check")
    if not check:
        return _run(job, scratch, task)
    with injected(task, check["size"], check["dims"]):
        return _run(job, scratch, task)


def _run(job: dict, scratch: Path, task) -> dict:
    """job: {task, size, seeds, reps, time_budget_s, check?, timing_seeds?}. Writes inputs_<i>.npz and ref_<i>.npz
    (and for the drawn check size {size, dims, seed} check_inputs.npz and check_ref.npz; for every timing seed
    timing_inputs_<j>.npz and timing_ref_<j>.npz), posts JUDGE_READY with the task's metadata, then (when the job
    says `wait`) waits for the parent's JUDGE_GO before it times the baseline and censuses the lowering the parent
    put beside it."""
    import jax
    import numpy as np

    from maxkernel.harness.jobs import timers
    from maxkernel.harness.verdict.arrays import save_arrays
    from maxkernel.harness.verdict.handoff import INPUTS_MADE, JUDGE_GO, JUDGE_READY, post, wait_for
    from maxkernel.harness.verdict.integrity import census
    from maxkernel.harness.verdict.numerics import errors, reference_outputs

    size, seeds = job["size"], list(job["seeds"])
    check, timing_seeds = job.get("check"), [int(s) for s in job.get("timing_seeds") or []]
    # Drawn op by op, as a person calling create_inputs gets them (a jitted draw fuses and can differ in the last
    # bit). Each op compiles once per shape, so a persistent judge's next verdict draws its fresh seeds at no
    # compile cost (8 draws of 12p_RMSNorm at smoke: 2.7 s of CPU cold either way; warm 0.02 s, jitted 3.1 s).
    drawn = [tuple(task.create_inputs(size=size, seed=s)) for s in seeds + timing_seeds]
    all_inputs, timing_inputs = drawn[:len(seeds)], drawn[len(seeds):]
    for i, inputs in enumerate(all_inputs):
        save_arrays(scratch / f"inputs_{i}.npz", [np.asarray(x) for x in inputs])
    check_inputs = None
    if check:
        check_inputs = tuple(task.create_inputs(size=check["size"], seed=int(check["seed"])))
        save_arrays(scratch / "check_inputs.npz", [np.asarray(x) for x in check_inputs])
    for j, inputs in enumerate(timing_inputs):
        save_arrays(scratch / f"timing_inputs_{j}.npz", [np.asarray(x) for x in inputs])
    if job.get("wait"):
        post(scratch, INPUTS_MADE, {})  # the candidate runs on them while the references are computed here
    first = all_inputs[0]
    traced = jax.jit(task.module.workload).trace(*first)
    leaves = jax.tree_util.tree_leaves(traced.out_info)
    counted = census(traced.jaxpr)
    dtypes = [str(leaf.dtype) for leaf in leaves]
    baseline = traced.lower().compile()
    meta = {
        "out_dtypes": dtypes,
        "out_shapes": [list(leaf.shape) for leaf in leaves],
        "in_shapes": [list(x.shape) for x in first],
        "timing_seeds": timing_seeds,
        "backend": jax.default_backend(),
        "tolerances": [task.tolerance(d) for d in dtypes],
        "flops": task.flops(size) or counted.total_flops,
        "baseline_flops": counted.total_flops,
        "baseline_contraction_flops": counted.contraction_flops,
        "bytes": int(sum(x.size * x.dtype.itemsize for x in first)
                     + sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in leaves)),
        "config": task.config,
    }
    calibration = None
    for i, inputs in enumerate(all_inputs):
        refs = reference_outputs(task.module.workload, inputs)
        save_arrays(scratch / f"ref_{i}.npz", refs)
        # How far XLA's own program lands from the f32 reference: the yardstick a kernel is held to.
        own = [np.asarray(x) for x in jax.tree_util.tree_leaves(baseline(*inputs))]
        errs = [errors(o, r) for o, r in zip(own, refs)]
        calibration = errs if calibration is None else [
            {k: max(a[k], b[k]) for k in a} for a, b in zip(calibration, errs)]
    meta["baseline_errors"] = calibration
    if check:
        # The same yardstick at the check size, where the reductions run to (nearly) their full length.
        refs = reference_outputs(task.module.workload, check_inputs)
        save_arrays(scratch / "check_ref.npz", refs)
        own = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(task.module.workload)(*check_inputs))]
        meta["check"] = {"size": check["size"], "dims": check["dims"], "seed": int(check["seed"]),
                         "out_shapes": [list(r.shape) for r in refs],
                         "baseline_errors": [errors(o, r) for o, r in zip(own, refs)]}
    for j, inputs in enumerate(timing_inputs):  # references for the timed calls' inputs, which the candidate gets late
        save_arrays(scratch / f"timing_ref_{j}.npz", reference_outputs(task.module.workload, inputs))
    out = {"status": "ok", "meta": meta, "timing": {"baseline_ms": [], "source": "wall", "window": None},
           "audit": None}
    if not job.get("wait"):
        out["timing"] = _time(baseline, all_inputs, job, timers, scratch)
        return out
    post(scratch, JUDGE_READY, {"meta": meta})
    go = wait_for(scratch, JUDGE_GO)
    if go.get("time"):
        out["timing"] = _time(baseline, all_inputs, job, timers, scratch)
    if go.get("lowered"):
        out["audit"] = _audit(scratch, str(go["lowered"]))
    return out


def _time(baseline, inputs, job: dict, timers, scratch: Path) -> dict:
    """The baseline timed alone in this process, rotating over the input sets like the candidate's timing."""
    import jax

    reps = int(job.get("reps", 0))
    timing = {"baseline_ms": [], "source": "wall", "window": None}
    if reps <= 0:
        return timing
    clock, mono, block = timers.TIMERS["perf_counter"], timers.TIMERS["monotonic"], jax.block_until_ready
    block(baseline(*inputs[0]))
    start, deadline = mono(), clock() + float(job.get("time_budget_s", 2.0))
    while len(timing["baseline_ms"]) < reps and (clock() < deadline or len(timing["baseline_ms"]) < 3):
        args = inputs[len(timing["baseline_ms"]) % len(inputs)]
        t0 = clock()
        block(baseline(*args))
        timing["baseline_ms"].append((clock() - t0) * 1e3)
    timing["window"] = [start, mono()]
    if jax.default_backend() != "cpu":
        from maxkernel.harness.jobs.device_timing import device_samples

        try:
            dev = device_samples({"baseline": baseline}, inputs[0], len(timing["baseline_ms"]),
                                 scratch / "device_trace")
        except Exception:  # noqa: BLE001  (a profiler failure leaves the wall-clock samples)
            dev = {}
        if dev.get("baseline"):
            timing.update(baseline_ms=dev["baseline"], source="device")
    return timing


def _audit(scratch: Path, name: str) -> dict:
    """The census of the candidate's TPU lowering (a copy the parent took, size-capped, from the candidate's
    scratch into this job's own)."""
    from maxkernel.harness.verdict.audit import AUDIT_TIMEOUT_S, MAX_LOWERED_BYTES, audit_module

    path = scratch / name
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_LOWERED_BYTES:
        return {"error": "the lowering is missing or too large"}
    return audit_module(path.read_bytes().decode("utf-8", errors="replace"), timeout=AUDIT_TIMEOUT_S)
