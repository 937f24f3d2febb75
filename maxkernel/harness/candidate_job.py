"""Sandbox job: make the inputs, freeze every setting, then import a candidate kernel, run it and time it.

Nothing this process returns is taken on trust (see harness/evaluate.py): outputs are arrays at names the parent
chose, timings are checked against the parent's own clock, and the census that decides is computed elsewhere, on
this process's TPU lowering of the kernel. What it does take care of is order: the race setting, timer and
expected outputs are fixed before the first line of candidate code runs, and the inputs (made by the judge from
seeds this process never sees) arrive only after the kernel is imported and compiled.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import re
import sys
import traceback
from pathlib import Path

__all__ = ["run", "load_kernel", "interpret_context", "headline", "record_race_states", "normalised_jaxpr"]

MAX_TIMED_SAVES = 3  # timed repetitions whose outputs differ from the checked run are shipped for comparison


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


def interpret_context(backend: str, detect_races: bool = False, params=None):
    """On CPU, run TPU kernels written for hardware under the strict TPU interpreter; elsewhere natively."""
    import contextlib

    if backend != "cpu":
        return contextlib.nullcontext()
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.force_tpu_interpret_mode(params or pltpu.InterpretParams(detect_races=detect_races))


def headline(exc: BaseException) -> str:
    """The most telling line of an error: the interpreter's own IndexError inside a runtime error, say."""
    text = f"{type(exc).__name__}: {exc}"
    inner = [ln.strip() for ln in str(exc).splitlines() if re.match(r"^\s*\w+(Error|Exception): ", ln)]
    return (inner[-1] if inner else text)[:2000]


def _fail(stage: str, exc: BaseException, **extra) -> dict:
    tb = traceback.format_exc()
    return {"status": "error", "stage": stage, "error": headline(exc), "traceback": tb[-3000:],
            "in_interpreter": "pallas/mosaic/interpret" in tb.rsplit("Traceback", 1)[-1], **extra}


_INTERPRET = re.compile(r"interpret=(?:False|None|True|InterpretParams\([^\n]*?\))(?=[,\s\]])")


def normalised_jaxpr(closed_jaxpr) -> str:
    """The jaxpr's text with the interpreter choice blanked: two traces of one honest kernel print the same."""
    return _INTERPRET.sub("interpret=*", str(closed_jaxpr))


def _output_problem(info, expected: list[tuple[list[int], str]]) -> str | None:
    """Why the traced outputs are not a flat tuple of arrays of the declared shapes and dtypes, or None."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten(info)
    flat_ok = tree == jax.tree_util.tree_structure(tuple(leaves)) or tree == jax.tree_util.tree_structure(list(leaves))
    if len(leaves) == 1 and tree == jax.tree_util.tree_structure(leaves[0]):
        flat_ok = True
    if not flat_ok:
        return f"workload returned {tree}, not a flat tuple of arrays"
    got = [(list(x.shape), str(x.dtype)) for x in leaves]
    if got != [(list(s), d) for s, d in expected]:
        return f"workload returned arrays {got}; the task declares {[(list(s), d) for s, d in expected]}"
    return None


def _watched() -> list:
    """The modules and classes whose attributes the harness relies on while it runs and times the kernel."""
    import jax
    import numpy as np

    from maxkernel.harness import arrays, timers

    mods = [sys.modules.get(n) for n in ("__main__", __name__, "maxkernel.harness.worker", "maxkernel.harness.device_timing")]
    return [m for m in mods if m is not None] + [
        jax, jax.tree_util, jax.stages.Compiled, jax.stages.Traced, jax.stages.Lowered, jax.stages.Wrapped,
        type(jax.numpy.zeros(())), arrays, timers, np, hashlib, json]


def snapshot() -> dict:
    """{(owner, name): (id of value, whether owner is a class)} for the watched objects, taken before the import."""
    out = {}
    for obj in _watched():
        label = getattr(obj, "__name__", type(obj).__name__)
        for name, value in list(vars(obj).items()):
            out[(label, name)] = (id(value), isinstance(obj, type))
    return out


def rebound(before: dict) -> list[str]:
    """Watched attributes replaced or deleted since `before`, and attributes added to watched classes."""
    after = snapshot()
    changed = {k for k, v in before.items() if after.get(k) != v}
    changed |= {k for k, v in after.items() if k not in before and v[1]}  # modules gain submodules as they load
    return sorted(f"{owner}.{name}" for owner, name in changed)


def _digest(leaves) -> str:
    import numpy as np

    h = hashlib.sha256()
    for x in leaves:
        a = np.asarray(x)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(np.ascontiguousarray(a).view(np.uint8).data)
    return h.hexdigest()


def run(job: dict, scratch: Path) -> dict:
    """job: {task, size, inputs (how many sets), kernel (file name in scratch), tunables, reps, time_budget_s,
    detect_races, watch}. The inputs_<i>.npz files arrive in `scratch` once the kernel is compiled."""
    import jax

    from maxkernel.harness import timers
    from maxkernel.harness.arrays import load_arrays, save_arrays
    from maxkernel.harness.handoff import INPUTS_READY, TIME_GO, wait_for
    from maxkernel.harness.integrity import census
    from maxkernel.tasks import load_task

    # -- everything the candidate could want to steer is decided here, before its import -------------------------
    clock, mono = timers.TIMERS["perf_counter"], timers.TIMERS["monotonic"]
    block = jax.block_until_ready
    backend = jax.default_backend()
    task = load_task(job["task"])
    reps, budget = int(job.get("reps", 0)), float(job.get("time_budget_s", 2.0))
    races = bool(job.get("detect_races", False)) and backend == "cpu"
    tunables = dict(job.get("tunables") or {})
    kernel_file = scratch / str(job["kernel"])
    n_inputs = int(job["inputs"])
    # Shapes only: the inputs themselves arrive after the kernel is imported and compiled (the judge's process
    # makes them from seeds this process never sees), so nothing in the import can read or precompute from them.
    structs = jax.eval_shape(lambda: task.create_inputs(size=job["size"], seed=0))
    expected = [(list(x.shape), str(x.dtype)) for x in jax.tree_util.tree_leaves(jax.eval_shape(task.module.workload, *structs))]
    params = None
    if backend == "cpu":
        from jax.experimental.pallas import tpu as pltpu

        params = pltpu.InterpretParams(detect_races=races)
    race_states = record_race_states() if races else None
    watched = snapshot() if job.get("watch", True) else None

    try:
        module = load_kernel(kernel_file)
    except BaseException as exc:  # noqa: BLE001
        return _fail("import", exc, backend=backend)

    def kernel(*args):  # named so its module is jit_kernel in a device profile
        return module.workload(*args, **tunables)

    t0 = clock()
    from maxkernel import chips

    try:  # traced twice: as a v5e sees it (for the census) and under the interpreter (to run on a CPU)
        with chips.trace_context(chips.get("v5e")) if backend == "cpu" else contextlib.nullcontext():
            plain = jax.jit(kernel).trace(*structs)
        with interpret_context(backend, races, params):
            traced = jax.jit(kernel).trace(*structs) if backend == "cpu" else plain
    except BaseException as exc:  # noqa: BLE001
        return _fail("trace", exc, backend=backend)
    problem = _output_problem(plain.out_info, expected)
    if problem:
        return {"status": "bad_output", "backend": backend, "error": problem}
    if traced is not plain and normalised_jaxpr(plain.jaxpr) != normalised_jaxpr(traced.jaxpr):
        return {"status": "bad_trace", "backend": backend,
                "error": "the kernel traced to a different program the second time (the census must see what runs)"}
    counted = census(plain.jaxpr).as_dict()
    lowered_tpu = export_error = None
    try:  # lowered in the v5e context it was traced in: Mosaic asks the chip for its tiling
        lowered_tpu = plain.lower(lowering_platforms=("tpu",)).as_text()
        (scratch / "lowered_tpu.mlir").write_text(lowered_tpu)
    except BaseException as exc:  # noqa: BLE001  (e.g. a GPU-only kernel: the census falls back, and says so)
        export_error = headline(exc)
    try:
        with interpret_context(backend, races, params):
            compiled = traced.lower().compile()
    except BaseException as exc:  # noqa: BLE001
        return _fail("compile", exc, backend=backend, census=counted)
    compile_s = clock() - t0

    ready = wait_for(scratch, INPUTS_READY)
    if ready.get("abort"):
        return {"status": "error", "stage": "sandbox", "error": "the harness gave up before the inputs arrived"}
    inputs = [tuple(jax.device_put(x) for x in load_arrays(scratch / f"inputs_{i}.npz")) for i in range(n_inputs)]
    first = inputs[0]
    outputs, run_ms, digests = [], [], []
    for i, args in enumerate(inputs):
        try:
            t1 = clock()
            leaves = jax.tree_util.tree_leaves(block(compiled(*args)))
            run_ms.append((clock() - t1) * 1e3)
        except BaseException as exc:  # noqa: BLE001
            return _fail("run", exc, backend=backend, census=counted, input=i)
        host = [jax.device_get(x) for x in leaves]
        save_arrays(scratch / f"out_{i}.npz", host)
        outputs.append(f"out_{i}.npz")
        digests.append(_digest(host))

    found = any(getattr(r, "races_found", False) for r in race_states) if race_states is not None else None
    timing = {"kernel_ms": [], "source": "wall", "window": None, "reps": []}
    if reps > 0 and wait_for(scratch, TIME_GO).get("abort"):  # timed only once the judge's process is idle
        return {"status": "error", "stage": "sandbox", "error": "the harness gave up before the timing"}
    if reps > 0:
        timing.update(_time(compiled, inputs, digests, reps, budget, clock, mono, block, scratch))
        if backend != "cpu":  # on an accelerator, prefer the device's own times from a profile
            from maxkernel.harness.device_timing import device_samples

            try:
                dev = device_samples({"kernel": compiled}, first, len(timing["kernel_ms"]), scratch / "device_trace")
            except Exception:  # noqa: BLE001  (a profiler failure leaves the wall-clock samples)
                dev = {}
            if dev.get("kernel"):
                timing.update(kernel_ms=dev["kernel"], source="device")
    replaced = timers.replaced_timers() + (["jax.block_until_ready"] if jax.block_until_ready is not block else [])
    if watched is not None:
        replaced += [name for name in rebound(watched) if name not in replaced]
    return {"status": "ran", "backend": backend, "census": counted, "outputs": outputs, "compile_s": compile_s,
            "run_ms": run_ms, "timing": timing, "races": found, "timers_replaced": replaced,
            "lowered_tpu": "lowered_tpu.mlir" if lowered_tpu else None, "export_error": export_error}


def _time(compiled, inputs, digests, reps, budget, clock, mono, block, scratch) -> dict:
    """Back-to-back timed calls rotating over every input set; afterwards each call's outputs are hashed, and
    shipped when they differ from the checked run. Back to back, so the loop's span bounds the samples' sum."""
    import jax

    from maxkernel.harness.arrays import save_arrays

    block(compiled(*inputs[0]))  # warm-up
    samples, kept = [], []
    start = mono()
    deadline = clock() + budget
    while len(samples) < reps and (clock() < deadline or len(samples) < 3):
        i = len(samples) % len(inputs)
        t0 = clock()
        out = block(compiled(*inputs[i]))
        samples.append((clock() - t0) * 1e3)
        kept.append((i, out))
    end = mono()
    checks, saved = [], 0
    for k, (i, out) in enumerate(kept):
        host = [jax.device_get(x) for x in jax.tree_util.tree_leaves(out)]
        same = _digest(host) == digests[i]
        entry = {"input": i, "same_as_checked": same, "file": None}
        if not same and saved < MAX_TIMED_SAVES:
            entry["file"] = f"timed_{k}.npz"
            save_arrays(scratch / entry["file"], host)
            saved += 1
        checks.append(entry)
    return {"kernel_ms": samples, "window": [start, end], "reps": checks}


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
