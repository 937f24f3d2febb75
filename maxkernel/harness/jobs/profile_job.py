"""Sandbox job: compile the baseline and a candidate kernel, trace a few runs of each, parse the trace."""

from __future__ import annotations

import re
import statistics
import traceback
from pathlib import Path

__all__ = ["run", "pallas_custom_calls", "condense"]

# custom_call_target values that a pallas_call lowers to (Mosaic TPU, Triton and Mosaic GPU).
PALLAS_TARGETS = ("tpu_custom_call", "__gpu$xla.gpu.triton", "mosaic_gpu", "mosaic_gpu_v2", "triton_kernel_call")
_CUSTOM_CALL = re.compile(r'^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*\bcustom-call\(.*custom_call_target="([^"]+)"', re.M)
TOP_OPS = 25
_RUN_BUDGET_S = 4.0  # per side: fewer traced runs for slow (interpreted, full-size) kernels


def pallas_custom_calls(hlo_text: str) -> list[str]:
    """Names of the HLO instructions in compiled `hlo_text` that are Pallas kernels."""
    return [name for name, target in _CUSTOM_CALL.findall(hlo_text) if target in PALLAS_TARGETS]


def _fail(stage: str, exc: BaseException, **extra) -> dict:
    return {"status": "error", "stage": stage, "error": condense(f"{type(exc).__name__}: {exc}"),
            "traceback": traceback.format_exc()[-3000:], **extra}


def condense(message: str, limit: int = 1500) -> str:
    """An error without the Python stack that callbacks (the TPU interpreter's) embed in it: head and cause."""
    lines = message.splitlines()
    frames = [i for i, ln in enumerate(lines) if ln.lstrip().startswith('File "')]
    if frames:
        rest = lines[frames[-1] + 1:]
        if rest and rest[0].startswith("    "):  # the last frame's source line
            rest = rest[1:]
        lines = lines[:1] + ["  ..."] + rest
    text = "\n".join(lines)
    return text if len(text) <= limit else text[: limit // 3] + " ... " + text[-(limit * 2 // 3):]


def run(job: dict, scratch: Path) -> dict:
    """job: {task, size, seed, kernel (file in scratch), tunables, trace_dir (folder in scratch), runs}."""
    import jax

    from maxkernel.harness.jobs import timers
    from maxkernel.harness.jobs.candidate_job import interpret_context, job_guard, load_kernel
    from maxkernel.tasks import load_task

    clock = timers.TIMERS["perf_counter"]
    backend = jax.default_backend()
    task = load_task(job["task"])
    inputs = tuple(jax.device_put(x) for x in task.create_inputs(size=job["size"], seed=job.get("seed", 0)))

    # Named functions so the two XLA modules are told apart (jit_baseline, jit_kernel) on device planes.
    def baseline(*args):
        return task.module.workload(*args)

    base = jax.jit(baseline).lower(*inputs).compile()
    try:
        module = load_kernel(scratch / job["kernel"], guard=job_guard(job, scratch))
    except BaseException as exc:  # noqa: BLE001
        return _fail("import", exc, backend=backend)
    tunables = job.get("tunables") or {}

    def kernel(*args):
        return module.workload(*args, **tunables)

    try:
        with interpret_context(backend):
            traced = jax.jit(kernel).trace(*inputs)
    except BaseException as exc:  # noqa: BLE001
        return _fail("trace", exc, backend=backend)
    try:
        with interpret_context(backend):
            compiled = traced.lower().compile()
    except BaseException as exc:  # noqa: BLE001
        return _fail("compile", exc, backend=backend)
    pallas_ops = pallas_custom_calls(compiled.as_text() or "")

    try:
        t0 = clock()
        out = jax.block_until_ready(base(*inputs))
        base_s = clock() - t0
        t0 = clock()
        jax.block_until_ready(compiled(*inputs))
        kernel_s = clock() - t0
    except BaseException as exc:  # noqa: BLE001
        return _fail("run", exc, backend=backend)
    nbytes = {"inputs": sum(x.nbytes for x in inputs),
              "outputs": sum(x.nbytes for x in jax.tree_util.tree_leaves(out))}

    want = int(job.get("runs", 3))
    runs = {"baseline": _runs(want, base_s), "kernel": _runs(want, kernel_s)}
    trace_root = scratch / job["trace_dir"]
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # Python tracing slows the interpreter several-fold and bloats the trace
    t0 = clock()
    try:
        with jax.profiler.trace(str(trace_root), profiler_options=options):
            for name, fn in (("baseline", base), ("kernel", compiled)):
                for _ in range(runs[name]):
                    with jax.profiler.TraceAnnotation(name):
                        jax.block_until_ready(fn(*inputs))
    except BaseException as exc:  # noqa: BLE001
        return _fail("profile", exc, backend=backend)
    trace_s = clock() - t0
    t0 = clock()
    try:
        regions = _analyse(trace_root, runs, pallas_ops)
    except BaseException as exc:  # noqa: BLE001
        return _fail("parse", exc, backend=backend)
    files = sorted(str(p.relative_to(scratch)) for p in trace_root.rglob("*") if p.is_file())
    return {"status": "ok", "backend": backend, "device_kind": jax.devices()[0].device_kind, "runs": runs,
            "pallas_ops": pallas_ops, "bytes": nbytes, "regions": regions, "trace_files": files,
            "trace_s": trace_s, "parse_s": clock() - t0, "warm_ms": {"baseline": base_s * 1e3, "kernel": kernel_s * 1e3}}


def _runs(want: int, one_s: float) -> int:
    return max(1, min(want, int(_RUN_BUDGET_S / max(one_s, 1e-6))))


def _analyse(trace_root: Path, runs: dict, pallas_ops: list[str]) -> dict:
    from maxkernel.harness.estimate import xplane as _xplane

    files = _xplane.find_traces(trace_root)
    if not files:
        raise FileNotFoundError(f"jax.profiler.trace wrote no .xplane.pb under {trace_root.name}")
    planes = [p for f in files for p in _xplane.load(f)]
    events = _xplane.op_events(planes)
    return {name: _region(planes, events, name, runs[name], pallas_ops if name == "kernel" else [])
            for name in ("baseline", "kernel")}


def _region(planes, events, name: str, runs: int, pallas_ops: list[str]) -> dict:
    """Time and op table of one annotated region: device ops of its module where there are any, else host."""
    from maxkernel.harness.estimate import xplane as _xplane

    windows = _xplane.annotation_windows(planes, name)
    wall_ms = [(end - start) / 1e6 for start, end in windows]
    module = f"jit_{name}"
    device = [e for e in events if e.plane.startswith(_xplane.DEVICE_PREFIX)]
    mine = [e for e in device if e.module == module] or [e for e in device if _xplane.in_windows(e, windows)]
    if mine:
        total_ns = sum(e.self_ns for e in mine)
        own = [e for e in mine if e.op in pallas_ops]
        table = _xplane.op_table(mine, runs, total_ns)
        time_ms = total_ns / runs / 1e6
        pallas_ms = sum(e.self_ns for e in own) / runs / 1e6 if own else None
        source = "device"
    else:
        host = [e for e in events if e.plane == _xplane.HOST_PLANE and _xplane.in_windows(e, windows)]
        total_ns = sum(end - start for start, end in windows)
        table = _xplane.op_table(host, runs, total_ns, main_module=module)
        time_ms = statistics.median(wall_ms) if wall_ms else None
        pallas_ms = None
        source = "host"
    return {"source": source, "time_ms": time_ms, "pallas_ms": pallas_ms, "wall_ms": wall_ms,
            "annotations": len(windows), "n_ops": len(table), "ops": table[:TOP_OPS]}
