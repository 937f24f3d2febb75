"""xprof_capture: profile a candidate kernel against the task baseline and save an XProf-readable trace."""

from __future__ import annotations

import os
import re
import shutil
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path, PurePosixPath
from typing import Iterator, Literal

from pydantic import BaseModel, Field

from maxkernel import chips
from maxkernel.harness.sandbox.guard import jobs_guarded
from maxkernel.harness.sandbox.copyout import CopyOutError, copy_tree_into
from maxkernel.harness.sandbox.pool import WorkerPool
from maxkernel.settings import get_settings
from maxkernel.tasks import TaskError, load_task
from maxkernel.tools import safepath
from maxkernel.tools.safepath import WorkspaceError

__all__ = ["OpRow", "Roofline", "ProfileResult", "xprof_capture", "CPU_NOTE"]

CPU_NOTE = ("CPU run: times are wall-clock of the Pallas TPU interpreter against XLA:CPU, and the op rows are the "
            "interpreter's own HLO (callbacks, loops), not the kernel's TPU instructions. These are CPU/interpreter "
            "numbers, NOT TPU performance: use them only for gross structure (how many grid steps, which "
            "callbacks dominate); profile on a TPU for kernel time.")
_CPU_DEFAULT_CHIP = "v5e"
_TOP_IN_RESULT = 15
_FRAME = re.compile(r'File "[^"]*/kernel\.py", (line \d+, in \S+)')


class OpRow(BaseModel):
    name: str
    time_ms: float = Field(description="Own time per run (nested ops excluded).")
    count: float = Field(description="Executions per run.")
    share: float = Field(description="Fraction of the region's time per run.")


class Roofline(BaseModel):
    chip: str
    flops: int | None
    bytes: int | None = Field(description="Input plus output bytes: the least HBM traffic possible.")
    intensity: float | None = Field(None, description="FLOPs per byte.")
    ridge: float | None = Field(None, description="Intensity above which the chip is compute-bound.")
    bound_ms: float | None = Field(description="Roofline lower bound on the chip at this size.")
    fraction: float | None = Field(description="bound_ms / kernel_ms; only when the kernel ran on this chip.")
    bound: Literal["compute", "memory"] | None


class ProfileResult(BaseModel):
    ok: bool
    summary: str
    backend: str = ""
    stage: str = ""
    error: str | None = None
    ops: list[OpRow] = Field(default_factory=list, description="The kernel run's top ops.")
    baseline_ops: list[OpRow] = Field(default_factory=list)
    n_ops: int = 0
    kernel_ms: float | None = None
    baseline_ms: float | None = None
    time_source: str = Field("", description="What kernel_ms measures.")
    runs: dict[str, int] = Field(default_factory=dict)
    trace: str | None = Field(None, description="The saved .xplane.pb; open its out_dir with TensorBoard/XProf.")
    out_dir: str | None = None
    skipped_files: list[str] = Field(default_factory=list,
                                     description="Trace entries not copied out (links, devices, oversized), with why.")
    roofline: Roofline | None = None
    cpu_note: str | None = None
    wall_s: float = 0.0


def xprof_capture(task: str, kernel: str, size: str = "smoke", out_dir: str | None = None, seed: int = 0,
                  chip: str | None = None, timeout: float | None = None, out_root: str | None = None) -> ProfileResult:
    """Profiles a Pallas kernel against the task's baseline and saves the trace for XProf/TensorBoard.

    Both are compiled and warmed up in a sandbox, then a few runs of each are traced with jax.profiler.
    On a TPU/GPU the kernel's time is the device time of its Pallas custom call; on CPU it is the wall
    time of the Pallas TPU interpreter, which says nothing about TPU performance.

    Args:
        task: Suite task name (e.g. "12p_RMSNorm") or a task folder path.
        kernel: Path of the kernel file; it must define workload(*inputs) taking the task's inputs.
        size: "smoke" (CPU-sized, default) or "full".
        out_dir: Folder for the trace (default: a new ./profiles/<task>-<timestamp>). Without out_root it is the
            caller's own folder and may be anywhere; nothing inside it is written through a link.
        seed: Seed of the inputs.
        chip: Chip for the roofline (e.g. "v5e", "v6e"); default the device profiled on, v5e on CPU.
        timeout: Seconds before the run is killed (default: the harness setting).
        out_root: A folder (e.g. a session workspace) that out_dir, or the default profiles/<task>-<timestamp>,
            is relative to and must stay inside: no link anywhere on the way is followed.

    Returns:
        ok, a short summary, kernel_ms and baseline_ms, the kernel's top ops (name, time per run, count,
        share), the roofline (FLOPs, bytes, lower bound, compute- or memory-bound) and the trace path.
    """
    t0 = time.monotonic()
    try:
        spec = load_task(task)
        if size not in spec.sizes:
            raise TaskError(f"task {spec.name} has no size {size!r} (has {', '.join(spec.sizes)})")
        target = chips.get(chip) if chip else None
    except (TaskError, ValueError) as exc:
        return ProfileResult(ok=False, stage="input", error=str(exc), summary=f"Not profiled: {exc}")
    path = Path(kernel)
    if not path.is_file():
        return ProfileResult(ok=False, stage="input", error=f"kernel file not found: {kernel}",
                             summary=f"Not profiled: kernel file not found: {kernel}")

    task_spec, task_files = spec.for_job()
    job = {"kind": "profile", "task": task_spec, "size": size, "seed": seed, "kernel": "kernel.py",
           "tunables": {}, "trace_dir": "trace", "guard": jobs_guarded()}
    with WorkerPool(size=0) as pool:
        res = pool.run(job, {"kernel.py": path.read_bytes(), **task_files}, timeout or get_settings().eval_timeout_s)
        try:
            r = res.result or {}
            if res.status != "ok" or r.get("status") != "ok":
                return _failure(res, r, kernel, time.monotonic() - t0)
            try:
                with _out_dir(out_dir, spec.name, out_root) as (dest, dest_fd):
                    # The trace folder was written by the candidate's process, and the output folder may hold links
                    # planted by another: regular files only, no link followed on either side.
                    taken = copy_tree_into(res.scratch, job["trace_dir"], dest_fd)
            except (OSError, CopyOutError, WorkspaceError) as exc:
                return ProfileResult(ok=False, stage="output", error=str(exc), backend=r.get("backend", ""),
                                     summary=f"Profiled, but the trace could not be saved: {exc}")
        finally:
            res.cleanup()
    xplanes = [f for f in taken.copied if f.endswith(".xplane.pb")]
    trace = dest / xplanes[-1] if xplanes else None
    try:
        out = _result(r, spec, size, target, dest, trace, time.monotonic() - t0)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return ProfileResult(ok=False, stage="sandbox", error=f"malformed profile result: {type(exc).__name__}: {exc}",
                             summary="Not profiled: the profile job returned a malformed result")
    return out.model_copy(update={"skipped_files": taken.skipped})


@contextmanager
def _out_dir(out_dir: str | None, task_name: str, out_root: str | None = None) -> Iterator[tuple[Path, int]]:
    """The output folder's path and an open descriptor of it, which everything in it is written from.

    out_dir alone: the caller's own folder (the CLI's --out), made by name, wherever it is, even through a link of
    theirs. Otherwise it is under out_root (default: the cwd, the MCP server's root), reached through safepath:
    every component made or opened from its parent's fd, no link followed (a `profiles` link is refused, never
    written through); the default is a new profiles/<task>-<timestamp>[-n] there."""
    with ExitStack() as stack:
        if out_dir and out_root is None:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
            stack.callback(os.close, fd)
            yield Path(out_dir).resolve(), fd
            return
        root = Path(out_root).resolve() if out_root is not None else Path.cwd()
        if out_dir:
            fd = stack.enter_context(safepath.make_dirs(root, out_dir))
            yield root / PurePosixPath(out_dir), fd
            return
        parent = stack.enter_context(safepath.make_dirs(root, "profiles"))
        stem = re.sub(r"[^\w.+-]", "_", task_name).lstrip(".") + f"-{time.strftime('%Y%m%d-%H%M%S')}"
        for n in range(1000):
            name = stem if n == 0 else f"{stem}-{n}"
            try:
                fd = stack.enter_context(safepath.make_dirs(parent, name, exist_ok=False))
            except FileExistsError:
                continue
            yield root / "profiles" / name, fd
            return
        raise FileExistsError(f"no free name {stem}-N under {root / 'profiles'}")


def _failure(res, r: dict, kernel: str, wall: float) -> ProfileResult:
    if res.status == "timeout":
        stage, err = "sandbox", f"the profile did not finish within {res.wall_s:.0f} s; its process was killed"
    elif res.status == "crashed":
        stage, err = "sandbox", f"the profile process died without a result ({res.death()})"
    else:
        stage, err = r.get("stage", "worker"), r.get("error") or "unknown error"
    # The innermost frame in the candidate's file, named by the caller's path rather than the sandbox copy.
    frames = _FRAME.findall(r.get("traceback") or res.stderr_tail or "")
    where = f"\n  at {kernel}, {frames[-1]}" if frames else ""
    summary = f"Profile failed at {stage}: {err[:600]}{where}"
    return ProfileResult(ok=False, stage=stage, error=err, backend=r.get("backend", ""), summary=summary,
                         wall_s=wall)


def _rows(table: list[dict]) -> list[OpRow]:
    return [OpRow(**row) for row in table[:_TOP_IN_RESULT]]


def _result(r: dict, spec, size: str, target, dest: Path, trace: Path | None, wall: float) -> ProfileResult:
    backend = r["backend"]
    kern, base = r["regions"]["kernel"], r["regions"]["baseline"]
    on_device = kern["source"] == "device"
    if on_device and kern["pallas_ms"] is not None:
        kernel_ms, source = kern["pallas_ms"], "device time of the Pallas custom call(s)"
    elif on_device:
        kernel_ms, source = kern["time_ms"], "device time of all the kernel program's ops (no Pallas call found)"
    else:
        kernel_ms, source = kern["time_ms"], "median host wall time per run (CPU: Pallas TPU interpreter)"
    ran_on = chips.from_device_kind(r.get("device_kind", "")) if backend != "cpu" else None
    chip = target or ran_on or chips.get(_CPU_DEFAULT_CHIP)
    roof = _roofline(chip, spec.flops(size), r["bytes"]["inputs"] + r["bytes"]["outputs"],
                     kernel_ms if ran_on is not None and ran_on.name == chip.name else None)
    ops = _rows(kern["ops"])
    cpu_note = CPU_NOTE if backend == "cpu" else None
    summary = _summary(backend, kernel_ms, base["time_ms"], ops, roof, on_device)
    return ProfileResult(ok=True, summary=summary, backend=backend, ops=ops, baseline_ops=_rows(base["ops"]),
                         n_ops=kern["n_ops"], kernel_ms=kernel_ms, baseline_ms=base["time_ms"], time_source=source,
                         runs=r["runs"], trace=str(trace) if trace else None, out_dir=str(dest), roofline=roof,
                         cpu_note=cpu_note, wall_s=wall)


def _roofline(chip, flops: int | None, nbytes: int, kernel_ms: float | None) -> Roofline:
    bound_ms = chips.roofline_seconds(chip, flops or 0, nbytes) * 1e3
    intensity = flops / nbytes if flops and nbytes else None
    ridge = chips.ridge_point(chip)
    kind = None if intensity is None else ("compute" if intensity >= ridge else "memory")
    return Roofline(chip=chip.name, flops=flops, bytes=nbytes, intensity=intensity, ridge=ridge, bound_ms=bound_ms,
                    fraction=bound_ms / kernel_ms if kernel_ms else None, bound=kind)


def _summary(backend: str, kernel_ms, baseline_ms, ops: list[OpRow], roof: Roofline, on_device: bool) -> str:
    where = "device time" if on_device else "CPU interpreter vs XLA:CPU wall time, not TPU time"
    lines = [f"kernel {kernel_ms:.3g} ms vs baseline {baseline_ms:.3g} ms ({where}, backend {backend})"
             if kernel_ms is not None and baseline_ms is not None else f"kernel timing unavailable ({backend})"]
    if ops:
        label = "top op" if on_device else "top interpreter op"
        lines[0] += f"; {label}: {ops[0].name} {ops[0].share:.0%}"
    if roof.bound is not None:
        advice = ("cut HBM traffic: fuse, read each input once, larger blocks" if roof.bound == "memory"
                  else "keep the MXU fed: bf16 operands, f32 accumulation, 128/256-multiple tiles")
        at = f", at {roof.fraction:.0%} of it" if roof.fraction is not None else ""
        lines.append(f"{roof.bound}-bound on {roof.chip} ({roof.intensity:.3g} FLOP/B vs ridge {roof.ridge:.0f}): "
                     f"roofline floor {roof.bound_ms:.3g} ms at this size{at}; {advice}")
    return "\n".join(lines)
