"""Sandbox job: make the inputs, freeze every setting, then import a candidate kernel, run it and time it.

Nothing this process returns is taken on trust (see harness/verdict/evaluate.py): outputs are arrays at names the parent
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

__all__ = ["run", "load_kernel", "job_guard", "interpret_context", "headline", "record_race_states", "normalised_jaxpr"]



def load_kernel(path: Path, guard=None):
    """Import a kernel file under a name unique to its path and content; it must define workload().

    guard: None in a trusted process. In a sandboxed job, the scratch folder (True: the kernel's own folder): the
    audit hook of harness/sandbox/guard.py is armed just before the kernel's first line runs, and stays for the process.
    """
    data = Path(path).read_bytes()
    name = "_maxkernel_kernel_" + hashlib.sha256(data + str(path).encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered first: dataclasses in the kernel look their module up by name
    try:
        if guard is None or guard is False:
            spec.loader.exec_module(module)
        else:  # compiled here, from the bytes just read: the guard allows the exec of exactly this code object
            from maxkernel.harness.sandbox import guard as _guard

            code = compile(data, str(path), "exec", dont_inherit=True)
            _guard.arm(Path(path), Path(path).parent if guard is True else Path(guard), code=code, module=module)
            exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    if not callable(getattr(module, "workload", None)):
        sys.modules.pop(name, None)
        raise AttributeError(f"{Path(path).name} does not define workload(*inputs)")
    return module


def job_guard(job: dict, scratch: Path) -> Path | None:
    """The scratch folder to arm the audit hook with (harness/sandbox/guard.py) for a job that imports a kernel, or None:
    only inside a sandboxed worker (the hook cannot be removed, so never in a process that goes on to do other
    work, such as a test calling a job in-process) and unless the job turns it off (tests of the layers behind)."""
    worker = sys.modules.get("__main__")
    in_worker = getattr(worker, "__spec__", None) is not None and worker.__spec__.name == "maxkernel.harness.jobs.worker"
    return Path(scratch) if in_worker and job.get("guard", True) else None


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
    """The program's text, the same for two traces of one honest kernel: every inner jaxpr written out where it is
    used with its own variable names, the interpreter choice blanked. (jax's printer hoists an inner jaxpr used
    twice into a named `let` and names variables by object, and which uses are one object depends on what the
    trace caches held: megablox's gmm printed its cumsum inline in one trace and hoisted in the next.)"""
    from maxkernel.harness.verdict.integrity import program_text

    return _INTERPRET.sub("interpret=*", program_text(closed_jaxpr))




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

    from maxkernel.harness.verdict import arrays
    from maxkernel.harness.verdict import checksize
    from maxkernel.harness.verdict import integrity
    from maxkernel.harness.jobs import timers

    mods = [sys.modules.get(n) for n in ("__main__", __name__, "maxkernel.harness.jobs.worker",
                                         "maxkernel.harness.jobs.device_timing")]
    return [m for m in mods if m is not None] + [
        jax, jax.tree_util, jax.stages.Compiled, jax.stages.Traced, jax.stages.Lowered, jax.stages.Wrapped,
        type(jax.numpy.zeros(())), arrays, timers, np, hashlib, json, integrity, checksize]


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


def run(job: dict, scratch: Path) -> dict:
    """job: {task, size, inputs (how many sets), kernel (file name in scratch), tunables, reps, time_budget_s,
    detect_races, watch, check ({size, dims}: the second size the parent drew, or None), timing_inputs (how many
    sets the timed calls run on), fingerprint_chip}. The inputs_<i>.npz files (and check_inputs.npz) arrive in
    `scratch` once the kernel is compiled; timing_inputs_<j>.npz only when the parent says to time."""
    import jax

    from maxkernel.harness.jobs import timers
    from maxkernel.harness.verdict.arrays import load_arrays, save_arrays
    from maxkernel.harness.verdict.checksize import inject
    from maxkernel.harness.verdict.handoff import INPUTS_READY, TIME_GO, wait_for
    from maxkernel.harness.verdict.integrity import census, fingerprint, interpreted_calls, pallas_kernels
    from maxkernel.tasks import load_task

    from maxkernel import chips

    # -- everything the candidate could want to steer is decided here, before its import -------------------------
    clock, mono = timers.TIMERS["perf_counter"], timers.TIMERS["monotonic"]
    block = jax.block_until_ready
    backend = jax.default_backend()
    task = load_task(job["task"])
    reps, budget = int(job.get("reps", 0)), float(job.get("time_budget_s", 2.0))
    races = bool(job.get("detect_races", False)) and backend == "cpu"
    tunables = dict(job.get("tunables") or {})
    kernel_file = scratch / str(job["kernel"])
    n_inputs, n_timing = int(job["inputs"]), int(job.get("timing_inputs") or 0)
    check = job.get("check") or None
    if check:
        inject(task.module, check["size"], check["dims"])
    # Shapes only: the inputs themselves arrive after the kernel is imported and compiled (the judge's process
    # makes them from seeds this process never sees), so nothing in the import can read or precompute from them.
    def shapes(size):
        structs = jax.eval_shape(lambda: task.create_inputs(size=size, seed=0))
        outs = jax.tree_util.tree_leaves(jax.eval_shape(task.module.workload, *structs))
        return structs, [(list(x.shape), str(x.dtype)) for x in outs]

    structs, expected = shapes(job["size"])
    check_structs, check_expected = shapes(check["size"]) if check else (None, None)
    fp_chip = chips.get(str(job.get("fingerprint_chip") or "v5e"))
    params = None
    if backend == "cpu":
        from jax.experimental.pallas import tpu as pltpu

        params = pltpu.InterpretParams(detect_races=races)
    race_states = record_race_states() if races else None
    watched = snapshot() if job.get("watch", True) else None

    try:
        module = load_kernel(kernel_file, guard=job_guard(job, scratch))
    except BaseException as exc:  # noqa: BLE001
        return _fail("import", exc, backend=backend)

    def kernel(*args):  # named so its module is jit_kernel in a device profile
        return module.workload(*args, **tunables)

    def traces(at, chip):  # as the chip sees it (census, lowering, fingerprint) and under the interpreter (to run)
        with chips.trace_context(chip) if backend == "cpu" else contextlib.nullcontext():
            plain = jax.jit(kernel).trace(*at)
        with interpret_context(backend, races, params):
            return plain, (jax.jit(kernel).trace(*at) if backend == "cpu" else plain)

    t0 = clock()
    try:
        plain, traced = traces(structs, chips.get("v5e"))
    except BaseException as exc:  # noqa: BLE001
        return _fail("trace", exc, backend=backend)
    plain_c = traced_c = check_error = None
    if check:  # a kernel that cannot run at the drawn size fails that check (after the census has had its say)
        try:
            plain_c, traced_c = traces(check_structs, fp_chip)
        except BaseException as exc:  # noqa: BLE001
            check_error = headline(exc)
    for p, t, want, at in ((plain, traced, expected, ""), (plain_c, traced_c, check_expected, " at the check size")):
        if p is None:
            continue
        problem = _output_problem(p.out_info, want)
        if problem:
            return {"status": "bad_output", "backend": backend, "error": problem + at}
        if t is not p and normalised_jaxpr(p.jaxpr) != normalised_jaxpr(t.jaxpr):
            return {"status": "bad_trace", "backend": backend,
                    "error": "the kernel traced to a different program the second time (the census must see what runs)"}
    chosen = interpreted_calls(plain.jaxpr)
    if chosen:
        return {"status": "bad_trace", "backend": backend,
                "error": f"a pallas_call asks for interpret={chosen[0]}: the harness chooses the interpreter itself "
                         "(pass interpret=False, or leave the parameter that carries it at its False default)"}
    counted = census(plain.jaxpr).as_dict()
    kernels = pallas_kernels(plain.jaxpr)
    if plain_c is not None and fp_chip.name != "v5e":
        fp_checked = fingerprint(traces(structs, fp_chip)[0].jaxpr)
    else:
        fp_checked = fingerprint(plain.jaxpr)
    fingerprints = {"checked": fp_checked, "check": fingerprint(plain_c.jaxpr) if plain_c is not None else None}
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
    compiled_c = None
    if traced_c is not None:
        try:
            with interpret_context(backend, races, params):
                compiled_c = traced_c.lower().compile()
        except BaseException as exc:  # noqa: BLE001
            check_error = headline(exc)
    compiled_s, small = _small_blocks(job, module, tunables, plain, structs, backend, races, params)
    compile_s = clock() - t0

    ready = wait_for(scratch, INPUTS_READY)
    if ready.get("abort"):
        return {"status": "error", "stage": "sandbox", "error": "the harness gave up before the inputs arrived"}
    inputs = [tuple(jax.device_put(x) for x in load_arrays(scratch / f"inputs_{i}.npz")) for i in range(n_inputs)]
    first = inputs[0]
    outputs, run_ms = [], []
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
    check_output = None
    if compiled_c is not None:  # the drawn second size: one input set, its reductions at (nearly) full length
        try:
            args = tuple(jax.device_put(x) for x in load_arrays(scratch / "check_inputs.npz"))
            t1 = clock()
            leaves = jax.tree_util.tree_leaves(block(compiled_c(*args)))
            run_ms.append((clock() - t1) * 1e3)
            save_arrays(scratch / "check_out.npz", [jax.device_get(x) for x in leaves])
            check_output = "check_out.npz"
        except BaseException as exc:  # noqa: BLE001
            check_error = headline(exc)

    if compiled_s is not None:  # the first input set again, with the smallest declared blocks that fit
        try:
            leaves = jax.tree_util.tree_leaves(block(compiled_s(*first)))
            save_arrays(scratch / "small_out.npz", [jax.device_get(x) for x in leaves])
            small["output"] = "small_out.npz"
        except BaseException as exc:  # noqa: BLE001
            small["error"] = headline(exc)

    found = any(getattr(r, "races_found", False) for r in race_states) if race_states is not None else None
    timing = {"kernel_ms": [], "source": "wall", "window": None, "reps": []}
    if reps > 0 and wait_for(scratch, TIME_GO).get("abort"):  # timed only once the judge's process is idle
        return {"status": "error", "stage": "sandbox", "error": "the harness gave up before the timing"}
    if reps > 0 and n_timing > 0:
        # Timed on input sets handed over only now, one per call: a memo of anything seen before answers wrong.
        fresh = [tuple(jax.device_put(x) for x in load_arrays(scratch / f"timing_inputs_{j}.npz")) for j in range(n_timing)]
        timing.update(_time(compiled, first, fresh, reps, budget, clock, mono, block, scratch))
        if backend != "cpu":  # on an accelerator, prefer the device's own times from a profile
            from maxkernel.harness.jobs.device_timing import device_samples

            try:
                dev = device_samples({"kernel": compiled}, first, len(timing["kernel_ms"]), scratch / "device_trace")
            except Exception:  # noqa: BLE001  (a profiler failure leaves the wall-clock samples)
                dev = {}
            if dev.get("kernel"):
                timing.update(kernel_ms=dev["kernel"], source="device")
    replaced = timers.replaced_timers() + (["jax.block_until_ready"] if jax.block_until_ready is not block else [])
    if watched is not None:
        replaced += [name for name in rebound(watched) if name not in replaced]
    return {"status": "ran", "backend": backend, "census": counted, "kernels": kernels, "fingerprints": fingerprints,
            "outputs": outputs, "check_output": check_output, "check_error": check_error, "small_blocks": small,
            "compile_s": compile_s,
            "run_ms": run_ms,
            "timing": timing, "races": found, "timers_replaced": replaced,
            "lowered_tpu": "lowered_tpu.mlir" if lowered_tpu else None, "export_error": export_error}


def _small_blocks(job: dict, module, tunables: dict, plain, structs, backend: str, races: bool, params):
    """(compiled, facts) for the small-blocks check (maxkernel.harness.verdict.small_blocks): the first of the
    parent's configurations that traces, takes more grid steps than the defaults and fits the budget, compiled for
    the interpreter before any input arrives; (None, facts saying why none) otherwise."""
    import jax

    from maxkernel.harness.verdict.small_blocks import budget, describe, grid_steps

    configs = [c for c in (job.get("small_blocks") or []) if isinstance(c, dict)]
    if not configs:
        return None, {}
    default_steps, why = grid_steps(plain.jaxpr), []
    for config in configs:
        def small_kernel(*args, _config=dict(config)):
            return module.workload(*args, **{**tunables, **_config})

        try:
            with interpret_context(backend, races, params):
                traced = jax.jit(small_kernel).trace(*structs)
            steps = grid_steps(traced.jaxpr)
            if steps <= default_steps or steps > budget(default_steps):
                why.append(f"{describe(config)}: {steps} grid steps (the defaults take {default_steps}; at most "
                           f"{budget(default_steps)})")
                continue
            with interpret_context(backend, races, params):
                compiled = traced.lower().compile()
        except BaseException as exc:  # noqa: BLE001  (a declared combination these dims do not allow)
            why.append(f"{describe(config)}: {headline(exc)[:200]}")
            continue
        return compiled, {"config": dict(config), "steps": steps, "default_steps": default_steps}
    return None, {"config": None, "skipped": "; ".join(why)[:800]}


def _time(compiled, warm, fresh, reps, budget, clock, mono, block, scratch) -> dict:
    """Back-to-back timed calls, each on its own input set (one the kernel has not seen before the call); every
    call's outputs are shipped afterwards for the judge's references. Back to back, so the loop's span bounds the
    samples' sum."""
    import jax

    from maxkernel.harness.verdict.arrays import save_arrays

    block(compiled(*warm))  # warm-up, on a checked input set
    samples, kept = [], []
    n = min(reps, len(fresh))
    start = mono()
    deadline = clock() + budget
    while len(samples) < n and (clock() < deadline or len(samples) < min(3, n)):
        i = len(samples)
        t0 = clock()
        out = block(compiled(*fresh[i]))
        samples.append((clock() - t0) * 1e3)
        kept.append((i, out))
    end = mono()
    checks = []
    for k, (i, out) in enumerate(kept):
        name = f"timed_{k}.npz"
        save_arrays(scratch / name, [jax.device_get(x) for x in jax.tree_util.tree_leaves(out)])
        checks.append({"input": i, "same_as_checked": False, "file": name})
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
