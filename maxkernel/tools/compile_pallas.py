"""compile_pallas: the TPU compiler's (or GPU lowering's) verdict on a kernel, on a CPU, in about a second."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

from pydantic import BaseModel, Field

from maxkernel import chips
from maxkernel.harness.sandbox.copyout import MAX_RESULT_BYTES, CopyOutError, read_bytes
from maxkernel.harness.estimate.estimator import TaskBaselineError, roofline_floors, task_work
from maxkernel.harness.sandbox.guard import jobs_guarded
from maxkernel.harness.sandbox.pool import WorkerPool
from maxkernel.settings import get_settings

__all__ = ["CompileResult", "compile_pallas", "compile_many", "compile_pool", "TPU_CHIPS"]

TPU_CHIPS = ("v4", "v5e", "v5p", "v6e", "7x")
_NO_PALLAS = ("no pallas_call in the traced program: it compiled as XLA's own program, so there is no Pallas kernel "
              "to check (evaluate rejects it too)")
_NO_PALLAS_HINT = "write the work inside pl.pallas_call: a kernel body over BlockSpec blocks and a grid"


class CompileResult(BaseModel):
    ok: bool
    summary: str
    chip: str
    stage: str = Field(description="lower, compile (deviceless libtpu) or native; task when the task's own "
                       "baseline.py fails (the kernel is not compiled); no_pallas when the kernel has no pallas_call.")
    error: str | None = None
    hint: str | None = None
    hint_family: str | None = Field(None, description="The error family the hint is for (e.g. renamed_api).")
    vmem_bytes: int | None = Field(None, description="Scoped VMEM the kernel reserves (TPU).")
    vmem_limit_bytes: int | None = Field(None, description="The scoped VMEM limit the kernel is held to: the one "
                                         "its CompilerParams(vmem_limit_bytes=...) asks for, else the chip's default.")
    vmem_limit_source: str | None = Field(None, description="kernel (its own CompilerParams) or chip (the default).")
    vmem_buffers: list[dict] = Field(default_factory=list, description="On a VMEM overflow: each block and "
                                     "scratch buffer (name, kind, shape, dtype, copies, bytes), largest first.")
    compile_s: float | None = None
    pallas_calls: int | None = Field(None, description="pallas_calls in the traced program (0: not a Pallas kernel).")
    flops: float | None = Field(None, description="The task's FLOPs at this size (its get_flops).")
    bytes_accessed: float | None = Field(None, description="The task's least HBM traffic: inputs read once, outputs "
                                         "written once.")
    roofline_ms: float | None = Field(None, description="The task's roofline floor on this chip (FLOPs at peak or "
                                      "bytes_accessed at full bandwidth, whichever is slower): the same figure, from "
                                      "the same function, as estimate's roofline_ms.")
    config: dict = Field(default_factory=dict)
    configs: dict = Field(default_factory=dict, description="A task with several configs (prefill, decode) compiled "
                          "at each: config -> {size, ok, summary, stage, error, vmem_bytes, roofline_ms}. The other "
                          "fields are the first failing config's, else the first config's.")
    lint: list[dict] = Field(default_factory=list, description="Bugs read in the kernel's source that compiling "
                             "cannot show (a reduction axis marked parallel, interpret=True left in, a BlockSpec in "
                             "the old argument order, a store that never runs, ...): family, hint, line.")


def _lint(source: str | None) -> list[dict]:
    from maxkernel.harness.hints.diagnose import lint

    return [{"family": d.family, "hint": d.hint, "line": d.line} for d in lint(source)] if source else []


def _with_source(raw: dict, source: str | None, findings: list[dict]) -> dict:
    """The job's record seen with the kernel's source (read here, in the parent, from the user's file): a failure
    the job could not name, or named without a line, gets the hint its text and the source give (with the line)."""
    from maxkernel.harness.hints.diagnose import diagnose

    raw = dict(raw)
    if source and not raw.get("ok") and raw.get("error"):
        found = diagnose(raw["error"], raw.get("chip"), source)
        if found is not None and (not raw.get("hint_family") or (found.family == raw["hint_family"] and found.line)):
            raw.update(hint=found.hint + (f" (line {found.line})" if found.line else ""), hint_family=found.family)
    raw["lint"] = findings
    return raw


def _result(raw: dict, size: str, work: tuple[float, int] | None = None) -> CompileResult:
    """`work`: the task's (FLOPs, least HBM bytes) at `size` (estimate.task_work), for the roofline."""
    chip = raw.get("chip", "")
    spec = None
    try:
        spec = chips.get(chip.removeprefix("native:"))
    except ValueError:
        pass
    asked = raw.get("vmem_limit_bytes")  # what the kernel asks for holds, not the chip's default
    limit = asked or (getattr(spec, "scoped_vmem_default_bytes", None) if spec else None)
    source = "kernel" if asked else ("chip" if limit else None)
    roof = None
    if work is not None and spec is not None and not spec.nominal:  # a placeholder chip has no honest peak
        roof = roofline_floors(spec, *work)["roofline_ms"] / 1e3
    if raw.get("ok") and raw.get("pallas_calls") == 0:  # the verdict's rule (integrity.judge): XLA's own program
        raw = {**raw, "ok": False, "stage": "no_pallas", "error": _NO_PALLAS, "hint": _NO_PALLAS_HINT}
    if raw.get("ok"):
        parts = [f"OK: compiles for {chip} ({raw.get('stage')}, {size} size)"]
        if raw.get("vmem_bytes") is not None:
            parts.append(f"VMEM {raw['vmem_bytes'] / 2**20:.2f} MiB" + (
                f" of {limit / 2**20:.0f} MiB scoped ({'the kernel asks for it' if source == 'kernel' else 'the chip default'})"
                if limit else ""))
        if roof:
            parts.append(f"roofline bound {roof * 1e3:.3f} ms")
        summary = "; ".join(parts) + "."
    elif raw.get("stage") == "task":
        summary = f"FAILED: {raw.get('error')}. The task is at fault, not the kernel; the kernel was not compiled."
    elif raw.get("stage") == "no_pallas":
        summary = (f"FAILED for {chip}: not a Pallas kernel: {raw.get('error')}"
                   + (f"\nHint: {raw['hint']}" if raw.get("hint") else ""))
    else:
        first = (raw.get("error") or "failed").splitlines()[0][:400]
        summary = f"FAILED at {raw.get('stage')} for {chip}: {first}" + (f"\nHint: {raw['hint']}" if raw.get("hint") else "")
    for f in raw.get("lint") or []:  # what the source says beside the compiler, once each
        if f["family"] != raw.get("hint_family"):
            summary += f"\nLint ({f['family']}" + (f", line {f['line']}" if f.get("line") else "") + f"): {f['hint']}"
    return CompileResult(ok=bool(raw.get("ok")), summary=summary, chip=chip, stage=raw.get("stage", ""),
                         error=raw.get("error"), hint=raw.get("hint"), hint_family=raw.get("hint_family"),
                         vmem_bytes=raw.get("vmem_bytes"), vmem_buffers=raw.get("vmem_buffers") or [],
                         vmem_limit_bytes=limit, vmem_limit_source=source, compile_s=raw.get("compile_s"), pallas_calls=raw.get("pallas_calls"),
                         flops=work[0] if work and work[0] else None, bytes_accessed=float(work[1]) if work else None,
                         roofline_ms=roof * 1e3 if roof else None,
                         config=raw.get("config") or {}, lint=raw.get("lint") or [])


_POOL: WorkerPool | None = None
_POOL_LOCK = threading.Lock()


def compile_pool() -> WorkerPool:
    """Process-wide pool whose pre-started workers have libtpu loaded and one compile done for the chip."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            import atexit

            _POOL = WorkerPool(warm_compiler=get_settings().chip)
            atexit.register(_POOL.close)
    return _POOL


def compile_many(task: str, kernel: str, chip_names: list[str], configs: list[dict] | None = None,
                 size: str = "full", timeout: float | None = None) -> list[CompileResult]:
    """Compile one kernel for each chip × tunable configuration, in one sandboxed process.

    Results arrive one per compile; if the process is killed (timeout), finished ones are kept and the
    rest are reported as not compiled.
    """
    configs = configs or [{}]
    wanted = [(cfg, c) for cfg in configs for c in chip_names]
    from maxkernel.tasks import load_task

    loaded = load_task(task)
    try:
        work = task_work(loaded, size)
    except TaskBaselineError as exc:  # the task's fault: say so, and compile nothing against a broken task
        return [_result({"ok": False, "chip": c, "stage": "task", "error": str(exc), "config": cfg}, size)
                for cfg, c in wanted]
    try:
        source = Path(kernel).read_text(errors="replace")
    except OSError:
        source = None
    findings = _lint(source)
    spec, task_files = loaded.for_job()
    job = {"kind": "compile_many", "task": spec, "kernel": "kernel.py", "chips": list(chip_names),
           "configs": configs, "size": size, "guard": jobs_guarded()}
    budget = timeout or min(get_settings().eval_timeout_s, 60.0 + 30.0 * len(wanted))
    files = {"kernel.py": Path(kernel).read_bytes(), **task_files}
    res = compile_pool().run(job, files, budget)
    done, again, retried = _progress(res), "", False
    if res.status == "crashed" and not done and res.signal == signal.SIGKILL:
        # Killed from outside before its first compile came back (the machine's out-of-memory killer takes the
        # largest process, which a compile may be while its neighbours are busy): run it once more, and say so. A
        # job that crashed itself (SIGSEGV, SIGABRT: the compiler on this kernel) is not run again.
        first = f"the first compile process died after {res.wall_s:.0f} s ({res.death()}) and was run again"
        res.cleanup()
        res = compile_pool().run(job, files, budget)
        done, retried = _progress(res), True
        again = f" ({first})" if res.status != "crashed" else ""
    try:
        why = (res.result or {}).get("error") or f"the compile process {res.status} after {res.wall_s:.0f} s"
        if res.status == "crashed":
            why += f" ({res.death()}{', twice in a row' if retried else ''})" + _last_line(res.stderr_tail)
        if res.status == "timeout" and not (res.result or {}).get("error"):
            why += (f" (its budget: {budget:.0f} s for {len(wanted)} compile(s); a loaded machine or a large kernel "
                    "may need more: `maxkernel compile --timeout SECONDS`)")
        # Errors name the sandbox's copy of the kernel; say the user's file instead.
        inside = str(res.scratch / "kernel.py") if res.scratch else None
        out = []
        for r in done[:len(wanted)]:
            try:
                for k in ("error", "hint"):
                    if r.get(k):
                        r[k] = users_file(str(r[k]), inside, str(kernel))
                out.append(_result(_with_source(r, source, findings), size, work))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a malformed record: stop trusting it
                why = f"the compile job wrote a malformed record ({type(exc).__name__}: {str(exc)[:200]})"
                break
        for cfg, chip in wanted[len(out):]:
            out.append(CompileResult(ok=False, summary=f"FAILED: not compiled: {why}", chip=chip, stage="sandbox",
                                     error=why, config=cfg))
        for r in out:
            r.summary += again
        return out
    finally:
        res.cleanup()


def _progress(res) -> list[dict]:
    """The compile records a job wrote before it ended (one JSON line per compile), read from its scratch."""
    from maxkernel.harness.jobs.compile_many_job import PROGRESS_FILE

    if res.scratch is None:
        return []
    try:  # written inside the sandbox: a regular file of JSON lines, or nothing is taken from it
        text = read_bytes(res.scratch, PROGRESS_FILE, MAX_RESULT_BYTES).decode(errors="replace")
        return [r for r in (json.loads(line) for line in text.splitlines() if line.strip()) if isinstance(r, dict)]
    except (CopyOutError, ValueError):
        return []


def _last_line(log: str) -> str:
    """The log's last line, said after a crash (where an abort or a fatal error names itself), or nothing."""
    lines = [ln.strip() for ln in (log or "").splitlines() if ln.strip()]
    return f"; its log ends: {lines[-1][:300]}" if lines else ""


def users_file(text: str, inside: str | None, kernel: str) -> str:
    """`text` naming the user's kernel file where it names the sandbox's copy (its full path, or the bare name
    kernel.py the job gave it in a frame or a `kernel.py:LINE` location)."""
    import re

    if inside:
        text = text.replace(inside, kernel)
    return re.sub(r'(?<![\w/.])kernel\.py(?=["\':,)\s]|$)', kernel.replace("\\", "\\\\"), text)


def compile_pallas(task: str, kernel: str, chip: str = "v5e", size: str = "full",
                   timeout: float | None = None) -> CompileResult:
    """Compiles a Pallas kernel for a target chip without needing that chip.

    TPU chips (v4, v5e, v5p, v6e, 7x) get real Mosaic + XLA:TPU compilation through libtpu's compile-only
    topologies; h100/h200 get GPU lowering (Triton / Mosaic GPU rules); "native" compiles on the attached
    accelerator. Catches block-shape (8,128) violations, scoped VMEM overflow, unaligned dynamic slices,
    dtypes a generation does not support and 64-bit types, with the compiler's own text and a hint.

    Args:
        task: Suite task name (e.g. "8p_GEMM") or a task folder path; its input shapes are used.
        kernel: Path of the kernel file defining workload(*inputs).
        chip: One of v4, v5e, v5p, v6e, 7x, h100, h200, native. Default v5e.
        size: "full" (default: the benchmark's shapes; nothing is allocated) or "smoke"; a task with several
            configs is compiled at each (`configs` in the result), or at one with "full@decode".
        timeout: Seconds for the compile process (default: 90, or the settings' evaluation timeout if lower).

    Returns:
        ok, a summary line, the stage reached, the error and a hint when it fails, VMEM use against the
        chip's scoped limit, and the task's roofline bound (the floor `estimate_tpu_time` reports as
        roofline_ms), and `lint`: bugs read in the kernel's source that compiling cannot show (a reduction
        axis marked parallel, interpret=True left in, a BlockSpec in the old argument order), each with its line.
        A kernel with no pallas_call fails (stage no_pallas); a task whose own baseline.py
        fails is reported as the task's failure (stage task), not the kernel's.
    """
    if chip != "native":
        chip = chips.get(chip).name  # "TPU v5e" means v5e; an unknown name raises a ValueError listing the valid ones
    per_config = _config_sizes(task, size)
    if not per_config:
        return compile_many(task, kernel, [chip], None, size, timeout=timeout)[0]
    got = {name: compile_many(task, kernel, [chip], None, sz, timeout=timeout)[0] for name, sz in per_config.items()}
    main = next((r for r in got.values() if not r.ok), next(iter(got.values())))
    summary = " | ".join(f"{name}: {r.summary}" for name, r in got.items())
    return main.model_copy(update={
        "ok": all(r.ok for r in got.values()), "summary": summary,
        "configs": {name: {"size": per_config[name], **r.model_dump(include={"ok", "summary", "stage", "error",
                                                                              "vmem_bytes", "roofline_ms"})}
                    for name, r in got.items()}})


def _config_sizes(task: str, size: str) -> dict[str, str]:
    """Config -> the size that runs it, for a task with several configs at a size naming none; else {}."""
    from maxkernel.tasks import load_task

    try:
        return load_task(task).config_sizes(size)
    except Exception:  # noqa: BLE001  (a task that does not load is compile_many's to report, as the task's fault)
        return {}
