"""Sandbox job: import a candidate kernel, run it on the given inputs, time it against the baseline."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
import traceback
from pathlib import Path

__all__ = ["run", "load_kernel"]


def load_kernel(path: Path):
    """Import a kernel file under a name unique to its path and content; it must define workload()."""
    data = Path(path).read_bytes()
    name = "_maxkernel_kernel_" + hashlib.sha256(data + str(path).encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered first: dataclasses in the kernel look their module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    if not callable(getattr(module, "workload", None)):
        sys.modules.pop(name, None)
        raise AttributeError(f"{Path(path).name} does not define workload(*inputs)")
    return module


def interpret_context(backend: str, detect_races: bool = False):
    """On CPU, run TPU kernels written for hardware under the strict TPU interpreter; elsewhere natively."""
    import contextlib

    if backend != "cpu":
        return contextlib.nullcontext()
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(detect_races=detect_races))


def headline(exc: BaseException) -> str:
    """The most telling line of an error: the interpreter's own IndexError inside a runtime error, say."""
    text = f"{type(exc).__name__}: {exc}"
    inner = [ln.strip() for ln in str(exc).splitlines() if re.match(r"^\s*\w+(Error|Exception): ", ln)]
    return (inner[-1] if inner else text)[:2000]


def _fail(stage: str, exc: BaseException, **extra) -> dict:
    return {"status": "error", "stage": stage, "error": headline(exc),
            "traceback": traceback.format_exc()[-3000:], **extra}


def _timed(fn, args, clock, block) -> float:
    t0 = clock()
    block(fn(*args))
    return (clock() - t0) * 1e3


def run(job: dict, scratch: Path) -> dict:
    """job: {task, seeds, kernel (file name in scratch), tunables, reps, time_budget_s, detect_races}."""
    import jax

    from maxkernel.harness import timers
    from maxkernel.harness.arrays import load_arrays, save_arrays
    from maxkernel.harness.integrity import census
    from maxkernel.tasks import load_task

    clock = timers.TIMERS["perf_counter"]
    # Taken before the candidate is imported: a kernel that swaps in a non-waiting version would time only
    # the dispatch of its work.
    block = jax.block_until_ready
    backend = jax.default_backend()
    task = load_task(job["task"])
    seeds = job["seeds"]
    inputs = {s: tuple(jax.device_put(x) for x in load_arrays(scratch / f"inputs_{s}.npz")) for s in seeds}
    first = inputs[seeds[0]]

    def baseline(*args):  # named so its module is jit_baseline in a device profile
        return task.module.workload(*args)

    # The baseline is compiled before any candidate code exists in this process.
    baseline = jax.jit(baseline).lower(*first).compile()

    try:
        module = load_kernel(scratch / job["kernel"])
    except BaseException as exc:  # noqa: BLE001
        return _fail("import", exc, backend=backend)
    tunables = job.get("tunables") or {}

    def kernel(*args):  # named so its module is jit_kernel in a device profile
        return module.workload(*args, **tunables)

    fn = kernel

    races = job.get("detect_races", False)
    race_states = record_race_states() if races and backend == "cpu" else None
    t0 = clock()
    try:
        with interpret_context(backend, races):
            traced = jax.jit(fn).trace(*first)
    except BaseException as exc:  # noqa: BLE001
        return _fail("trace", exc, backend=backend)
    counted = census(traced.jaxpr).as_dict()
    try:
        with interpret_context(backend, races):
            compiled = traced.lower().compile()
    except BaseException as exc:  # noqa: BLE001
        return _fail("compile", exc, backend=backend, census=counted)
    compile_s = clock() - t0

    outputs, run_ms = {}, []
    for s in seeds:
        try:
            t1 = clock()
            out = block(compiled(*inputs[s]))
            run_ms.append((clock() - t1) * 1e3)
        except BaseException as exc:  # noqa: BLE001
            return _fail("run", exc, backend=backend, census=counted, seed=s)
        name = f"out_{s}.npz"
        save_arrays(scratch / name, [jax.device_get(x) for x in jax.tree_util.tree_leaves(out)])
        outputs[str(s)] = name

    found = any(getattr(r, "races_found", False) for r in race_states) if race_states is not None else None
    timing = {"baseline_ms": [], "kernel_ms": []}
    if job.get("reps", 0) > 0:
        # Interleaved, after a warm-up of each, until the rep count or the time budget runs out.
        _timed(baseline, first, clock, block)
        _timed(compiled, first, clock, block)
        deadline = clock() + job.get("time_budget_s", 2.0)
        while len(timing["kernel_ms"]) < job["reps"] and (clock() < deadline or len(timing["kernel_ms"]) < 3):
            timing["baseline_ms"].append(_timed(baseline, first, clock, block))
            timing["kernel_ms"].append(_timed(compiled, first, clock, block))
        timing["source"] = "wall"
        if backend != "cpu":  # on an accelerator, prefer the device's own times from a profile
            from maxkernel.harness.device_timing import device_samples

            try:
                dev = device_samples({"baseline": baseline, "kernel": compiled}, first, len(timing["kernel_ms"]),
                                     scratch / "device_trace")
            except Exception:  # noqa: BLE001  (a profiler failure leaves the wall-clock samples)
                dev = {}
            if dev.get("baseline") and dev.get("kernel"):
                timing.update(baseline_ms=dev["baseline"], kernel_ms=dev["kernel"], source="device")
    replaced = timers.replaced_timers() + (["jax.block_until_ready"] if jax.block_until_ready is not block else [])
    return {"status": "ran", "backend": backend, "census": counted, "outputs": outputs, "compile_s": compile_s,
            "run_ms": run_ms, "timing": timing, "races": found, "timers_replaced": replaced}


def record_race_states() -> list:
    """Collect every race-detection state the TPU interpreter creates from now on in this process.

    The interpreter makes a fresh state per pallas_call, so the module-level one only speaks for the last
    kernel run; a candidate with several kernels needs all of them checked.
    """
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

    made: list = []
    base = ipc.RaceDetectionState

    class Recorded(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    ipc.RaceDetectionState = Recorded
    return made
