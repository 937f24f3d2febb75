"""Sandbox job: lower a kernel for a target chip, then compile it deviceless (libtpu) or natively.

The roofline bound is not this job's: the parent takes it from the task and the chip (harness/estimate/estimator.py
roofline_floors), the same figure the estimate reports."""

from __future__ import annotations

import functools
import os
import re
import time
from pathlib import Path

from maxkernel import chips as chips_mod
from maxkernel.harness.jobs.candidate_job import job_guard, load_kernel
from maxkernel.harness.verdict.integrity import pallas_kernels
from maxkernel.tasks import load_task
from maxkernel.harness.hints.diagnose import diagnose

__all__ = ["run", "supported_tpu_chips", "vmem_from_hlo", "vmem_from_error", "trim_error"]

_TOPOLOGY_DEVICES: dict[str, object] = {}  # chip name -> one device of its compile-only topology
_ERROR_CHARS = 1500


def run(job: dict, scratch: Path) -> dict:
    """job: {task, kernel (path, or file name in scratch), chip (name or "native"), size, tunables}.

    Returns {ok, chip, stage, error, hint, vmem_bytes, compile_s, lower_s, memory, pallas_calls}. Stage "task": the
    task's own create_inputs failed (no kernel advice). pallas_calls counts the traced program's pallas_calls
    (integrity.pallas_kernels): 0 is XLA's own program, which compiles here (a baseline's memory check compiles
    one) and which compile_pallas refuses as a kernel. Unknown task, chip or kernel path raise (usage errors).
    """
    import jax

    task = load_task(job["task"])
    size = job.get("size", "full")
    kernel_path = Path(job["kernel"])
    if not kernel_path.is_absolute() and (Path(scratch) / kernel_path).is_file():
        kernel_path = Path(scratch) / kernel_path
    if not kernel_path.is_file():
        raise FileNotFoundError(f"kernel file not found: {kernel_path}")
    chip_name = job.get("chip", "native")
    chip = None if chip_name == "native" else chips_mod.get(chip_name)

    out = {"ok": False, "chip": chip.name if chip else "native", "stage": "lower", "error": None,
           "hint": None, "hint_family": None, "vmem_bytes": None, "compile_s": 0.0, "lower_s": 0.0, "memory": None,
           "pallas_calls": None, "vmem_limit_bytes": None}

    # Shapes only: full-size inputs are never allocated.
    try:
        structs = jax.eval_shape(lambda: task.create_inputs(size=size, seed=0))
    except Exception as exc:  # noqa: BLE001  (the task's own code: its failure is the task's, not the kernel's)
        out.update(stage="task", error=f"the task's baseline.py fails in its create_inputs at {size} size: "
                                       f"{trim_error(exc)}")
        return out
    try:
        module = load_kernel(kernel_path, guard=job_guard(job, scratch))
        fn = module.workload
        if job.get("tunables"):
            fn = functools.partial(fn, **job["tunables"])
    except Exception as exc:  # noqa: BLE001  (the candidate's import can raise anything)
        return _failed(out, "lower", exc, chip)

    if chip is None:
        return _native(out, fn, structs, task, size)

    t0 = time.perf_counter()
    try:
        with chips_mod.trace_context(chip):
            traced = jax.jit(fn).trace(*structs)
            out["pallas_calls"] = len(pallas_kernels(traced.jaxpr))
            out["vmem_limit_bytes"] = _asked_vmem_limit(traced.jaxpr)
            traced.lower(lowering_platforms=(chip.lowering_platform,))
    except Exception as exc:  # noqa: BLE001
        out["lower_s"] = time.perf_counter() - t0
        return _failed(out, "lower", exc, chip)
    out["lower_s"] = time.perf_counter() - t0

    if not chip.is_tpu:
        # No deviceless GPU compiler is installed here: lowering (Triton/Mosaic GPU rules) is the check.
        out.update(ok=True)
        return out

    out["stage"] = "compile"
    device = _topology_device(chip)
    if isinstance(device, str):
        out.update(error=device, hint="install the libtpu wheel pinned by jax[tpu] for deviceless TPU compiles")
        return out
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    sharding = NamedSharding(Mesh([device], ("d",)), PartitionSpec())
    placed = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), structs)
    t0 = time.perf_counter()
    try:
        with chips_mod.trace_context(chip):
            lowered = jax.jit(fn).trace(*placed).lower()
            t0 = time.perf_counter()
            compiled = lowered.compile()
    except Exception as exc:  # noqa: BLE001
        out["compile_s"] = time.perf_counter() - t0
        return _failed(out, "compile", exc, chip, footprint=lambda: _footprint(fn, structs, chip))
    out["compile_s"] = time.perf_counter() - t0
    out.update(ok=True, vmem_bytes=vmem_from_hlo(compiled.as_text()), memory=_memory(compiled))
    return out


def _footprint(fn, structs, chip) -> list:
    """The program's VMEM buffers, traced again at the failing shapes (no compile)."""
    import jax

    from maxkernel.harness.hints import vmem_footprint

    with chips_mod.trace_context(chip):
        return vmem_footprint.buffers(jax.make_jaxpr(fn)(*structs))


def supported_tpu_chips() -> list[str]:
    """TPU chips whose compile-only topology the installed libtpu can build."""
    return [c.name for c in chips_mod.CHIPS.values() if c.is_tpu and not isinstance(_topology_device(c), str)]


def vmem_from_hlo(hlo_text: str) -> int | None:
    """Largest scoped VMEM one Pallas kernel reserves, from libtpu's used_scoped_memory_configs.

    XLA's own fusions reserve scoped VMEM too; they count only when the program has no Pallas kernel.
    """
    lines = [ln for ln in hlo_text.splitlines() if "used_scoped_memory_configs" in ln]
    kernels = [ln for ln in lines if 'custom_call_target="tpu_custom_call"' in ln]
    best = None
    for line in kernels or lines:
        for block in re.findall(r'"used_scoped_memory_configs":\[(.*?)\]', line):
            sizes = re.findall(r'"memory_space":"(\d+)","offset":"\d+","size":"(\d+)"', block)
            total = sum(int(size) for space, size in sizes if space == "1")  # memory space 1 is VMEM
            best = max(best or 0, total)
    return best


def vmem_from_error(text: str) -> int | None:
    """The VMEM the failing program asked for, as libtpu's out-of-memory messages state it."""
    m = (re.search(r"Scoped allocation with size ([\d.]+)([KMG])", text)
         or re.search(r"Used ([\d.]+)([KMG]) of [\d.]+[KMG] vmem", text))
    if m:
        return int(float(m.group(1)) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)])
    m = re.search(r"Allocation \(size=(\d+)\) would exceed memory \(size=\d+\).*?space=vmem", text, re.S)
    return int(m.group(1)) if m else None


def trim_error(exc: BaseException) -> str:
    """The compiler's own words: the message without Python traces, MLIR dumps or allocation listings."""
    text = str(exc) or type(exc).__name__
    keep = []
    for line in text.splitlines():
        if re.match(r"\s*(Largest program allocations|The Python stack trace|Traceback \(most recent)", line):
            break
        keep.append(line)
    text = "\n".join(keep).strip()
    text = re.sub(r'"body":"[A-Za-z0-9+/=]{64,}"', '"body":"…"', text)
    text = re.sub(r"\n\s*\n+", "\n", text)
    name = type(exc).__name__
    text = text if text.startswith(name) else f"{name}: {text}"
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 1] + "…"


def _failed(out: dict, stage: str, exc: BaseException, chip, footprint=None) -> dict:
    """`footprint`: a thunk giving the VMEM buffers, asked only when the error is an out-of-VMEM one."""
    full = str(exc)
    found = diagnose(full, chip)
    hint = found.hint if found else None
    out.update(stage=stage, error=trim_error(exc), hint_family=found.family if found else None,
               vmem_bytes=vmem_from_error(full))
    if found and found.family == "vmem_overflow" and footprint is not None:
        from maxkernel.harness.hints.vmem_footprint import describe

        try:
            bufs = footprint()
        except Exception:  # noqa: BLE001  (the hint is a help: a kernel that fails to re-trace keeps the plain one)
            bufs = []
        if bufs:
            hint = f"{hint} ({describe(bufs, out['vmem_bytes'])})"
            out["vmem_buffers"] = [{"name": b.name, "kind": b.kind, "shape": list(b.shape), "dtype": b.dtype,
                                    "copies": b.copies, "bytes": b.total} for b in bufs]
    out["hint"] = hint
    return out


def _native(out: dict, fn, structs, task, size) -> dict:
    import jax

    out["stage"] = "native"
    chip = chips_mod.detect()
    out["chip"] = f"native:{chip.name}"
    if jax.default_backend() == "cpu":
        out["error"] = ("no accelerator is attached: the default JAX backend is cpu, which cannot compile "
                        "Mosaic kernels; use --chip v4/v5e/v5p/v6e/7x (deviceless) or h100/h200 (lowering)")
        return out
    t0 = time.perf_counter()
    try:
        traced = jax.jit(fn).trace(*structs)
        out["pallas_calls"] = len(pallas_kernels(traced.jaxpr))
        lowered = traced.lower()
        out["lower_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        compiled = lowered.compile()
    except Exception as exc:  # noqa: BLE001
        out["compile_s"] = time.perf_counter() - t0
        return _failed(out, "native", exc, chip)
    out["compile_s"] = time.perf_counter() - t0
    out.update(ok=True, vmem_bytes=vmem_from_hlo(compiled.as_text()), memory=_memory(compiled))
    return out


def _asked_vmem_limit(closed_jaxpr) -> int | None:
    """The largest scoped VMEM limit the program's pallas_calls ask for (CompilerParams(vmem_limit_bytes=...)),
    or None when none asks: the limit the compiler holds the kernel to, where the chip's default does not."""
    from maxkernel.harness.hints.vmem_footprint import walk_eqns

    asked = []
    for eqn in walk_eqns(closed_jaxpr.jaxpr):
        if eqn.primitive.name == "pallas_call":
            params = eqn.params.get("compiler_params") or {}
            params = params.get("mosaic_tpu", params) if isinstance(params, dict) else params
            limit = getattr(params, "vmem_limit_bytes", None)
            if limit:
                asked.append(int(limit))
    return max(asked) if asked else None


def _topology_device(chip):
    """One device of the chip's compile-only topology (cached per process), or why there is none."""
    if chip.name in _TOPOLOGY_DEVICES:
        return _TOPOLOGY_DEVICES[chip.name]
    # Without this libtpu takes an exclusive lock file, and any second process using it fails.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    try:
        from jax.experimental import topologies

        topo = topologies.get_topology_desc(
            platform="tpu", topology_name=chip.topology_name, chip_config_name="default",
            chips_per_host_bounds=(1, 1, 1), num_slices=1, wrap=(False, False, False))
    except Exception as exc:  # noqa: BLE001  (not cached: a busy or missing libtpu may be fixed later)
        return (f"libtpu cannot build the {chip.name} compile-only topology ({chip.topology_name}): "
                f"{str(exc).splitlines()[0][:300]}")
    # v4 and 7x topologies list one device per TensorCore; one is the compile target.
    _TOPOLOGY_DEVICES[chip.name] = topo.devices[0]
    return _TOPOLOGY_DEVICES[chip.name]


def _memory(compiled) -> dict | None:
    try:
        ma = compiled.memory_analysis()
    except Exception:  # noqa: BLE001  (not every backend implements it)
        return None
    if ma is None:
        return None
    fields = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes",
              "generated_code_size_in_bytes", "peak_memory_in_bytes")
    return {f: int(getattr(ma, f)) for f in fields if hasattr(ma, f)}
