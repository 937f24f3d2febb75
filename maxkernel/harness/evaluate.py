"""The trusted verdict: references in one sandboxed process, the candidate in another, compared here."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from maxkernel.harness.arrays import load_arrays
from maxkernel.harness.copyout import CopyOutError, open_regular
from maxkernel.harness.integrity import Census, judge
from maxkernel.harness.numerics import compare
from maxkernel.harness.sandbox import SandboxResult, WorkerPool
from maxkernel.harness.verdict import Correctness, SeedCheck, Timing, Verdict
from maxkernel.settings import get_settings
from maxkernel.tasks import Task, load_task

__all__ = ["Evaluator", "evaluate", "shared_evaluator", "HarnessError", "MAX_PLAUSIBLE_SPEEDUP"]

MAX_PLAUSIBLE_SPEEDUP = 10.0
_REF_FORMAT = 2  # bump when reference_job's outputs change, so stale caches are not read
CPU_TIMING_LABEL = ("CPU wall time: the Pallas TPU interpreter against XLA:CPU; says nothing about TPU "
                    "kernel performance")


class HarnessError(RuntimeError):
    """The harness itself failed (not the candidate): the reference could not be computed."""


class Evaluator:
    """Judges candidate kernels. Reuse one Evaluator (and its pool) for many evaluations."""

    def __init__(self, pool: WorkerPool | None = None):
        self.settings = get_settings()
        self._own_pool = pool is None
        self.pool = pool or WorkerPool()

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- references -------------------------------------------------------------------------------------
    def references(self, task: Task, size: str, seeds: list[int]) -> tuple[dict, Path]:
        """(meta, folder) for the task's references at `size`; computed in a sandbox once, then cached."""
        folder = self.settings.cache_dir / "refs" / f"{task.name}-{task.digest}-{size}-v{_REF_FORMAT}"
        missing = [s for s in seeds if not (folder / f"ref_{s}.npz").is_file()]
        if not (folder / "meta.json").is_file():  # a run interrupted before meta.json: redo every seed asked
            missing = list(seeds)
        if missing:
            spec, task_files = task.for_job()
            res = self.pool.run({"kind": "reference", "task": spec, "size": size, "seeds": missing}, task_files)
            try:
                if res.status != "ok" or (res.result or {}).get("status") != "ok":
                    detail = (res.result or {}).get("error") or res.stderr_tail[-1500:]
                    raise HarnessError(f"reference for {task.name} ({size}) failed: {res.status}: {detail}")
                folder.mkdir(parents=True, exist_ok=True)
                for s in missing:
                    for kind in ("inputs", "ref"):
                        tmp = folder / f".{kind}_{s}.npz.{time.monotonic_ns()}"
                        try:
                            with open_regular(res.scratch, f"{kind}_{s}.npz") as src, open(tmp, "wb") as dst:
                                shutil.copyfileobj(src, dst, 1 << 20)
                        except CopyOutError as exc:
                            raise HarnessError(f"reference for {task.name} ({size}) not taken: {exc}") from None
                        tmp.replace(folder / f"{kind}_{s}.npz")
                tmp = folder / f".meta.json.{time.monotonic_ns()}"
                tmp.write_text(json.dumps(res.result["meta"]))
                tmp.replace(folder / "meta.json")
            finally:
                res.cleanup()
        return json.loads((folder / "meta.json").read_text()), folder

    # -- the verdict ------------------------------------------------------------------------------------
    def evaluate(self, task: str | Task, kernel: str | Path, *, size: str = "smoke", seeds: list[int] | None = None,
                 timeout: float | None = None, reps: int | None = None, tunables: dict | None = None,
                 detect_races: bool = True) -> Verdict:
        t_start = time.monotonic()
        task = task if isinstance(task, Task) else load_task(task)
        kernel = Path(kernel)
        if not kernel.is_file():
            raise FileNotFoundError(f"kernel file not found: {kernel}")
        if size not in task.sizes:
            raise ValueError(f"task {task.name} has no size {size!r} (has {', '.join(task.sizes)})")
        seeds = list(seeds if seeds is not None else range(self.settings.eval_seeds))
        meta, ref_dir = self.references(task, size, seeds)
        base = dict(task=task.name, kernel_file=str(kernel), size=size, isolation=self.pool_isolation(),
                    passed_env=self.settings.sandbox_env_names)

        spec, task_files = task.for_job()
        files: dict = {"kernel.py": kernel.read_bytes(), **task_files}
        files.update({f"inputs_{s}.npz": ref_dir / f"inputs_{s}.npz" for s in seeds})
        job = {"kind": "candidate", "task": spec, "seeds": seeds, "kernel": "kernel.py",
               "tunables": tunables or {}, "reps": 5 if reps is None else reps, "time_budget_s": 2.0,
               "detect_races": detect_races}
        res = self.pool.run(job, files, timeout or self.settings.eval_timeout_s)
        try:
            verdict = self._judge(res, meta, ref_dir, seeds, base)
        finally:
            res.cleanup()
        wall = time.monotonic() - t_start
        own = None
        if verdict.kernel is not None and verdict.status != "error":
            r = res.result
            own = (r.get("compile_s") or 0.0) + sum(r.get("run_ms") or []) / 1e3 + sum(verdict.kernel.samples_ms) / 1e3
        return verdict.model_copy(update={"wall_s": wall, "overhead_s": None if own is None else max(wall - own, 0.0)})

    def pool_isolation(self) -> str:
        from maxkernel.harness.sandbox import isolation_mode

        return isolation_mode()

    def _judge(self, res: SandboxResult, meta: dict, ref_dir: Path, seeds: list[int], base: dict) -> Verdict:
        try:
            return self._judge_result(res, meta, ref_dir, seeds, base)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            # result.json is written inside the candidate's process: a malformed one is an error, never a crash here.
            return Verdict(**base, status="error", stage="sandbox",
                           reason=f"the candidate's process returned a malformed result ({type(exc).__name__}: "
                                  f"{str(exc)[:200]})")

    def _judge_result(self, res: SandboxResult, meta: dict, ref_dir: Path, seeds: list[int], base: dict) -> Verdict:
        if res.result and res.result.get("status") == "ran":
            try:  # written inside the candidate's process: its shape is checked before any field is used
                res.result = CandidateResult.model_validate(res.result).model_dump()
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(x) for x in first["loc"])
                return Verdict(**base, status="error", stage="sandbox",
                               reason=f"the candidate's process returned a malformed result ({where}: {first['msg']})")
        if "scratch" in res.limits_hit:
            return Verdict(**base, status="error", stage="sandbox",
                           reason=f"the candidate filled its scratch folder (the {self.settings.sandbox_scratch_mb} MiB cap)")
        if "pids" in res.limits_hit:
            from maxkernel.harness.sandbox import max_pids

            return Verdict(**base, status="error", stage="sandbox",
                           reason=f"the candidate hit the sandbox's process limit ({max_pids()} processes and threads)")
        r = res.result or {}
        if res.status == "timeout":
            return Verdict(**base, status="timeout", stage="sandbox",
                           reason=f"the candidate did not finish within {res.wall_s:.0f} s; its process group was killed",
                           detail=res.stderr_tail[-2000:])
        if res.status == "crashed":
            return Verdict(**base, status="error", stage="sandbox",
                           reason=f"the candidate process died without a result (exit code {res.returncode})"
                                  + _memory_hint(res.stderr_tail),
                           detail=res.stderr_tail[-2000:])
        integrity = r.get("census") or {}
        if r.get("status") != "ran":
            return Verdict(**base, status="error", stage=r.get("stage", "worker"), reason=r.get("error", "unknown error"),
                           detail=r.get("traceback", "")[-2000:], integrity=integrity, backend=r.get("backend", ""))
        common = dict(base, integrity=integrity, backend=r["backend"], compile_s=r.get("compile_s"))
        if r.get("timers_replaced"):
            return Verdict(**common, status="rejected", stage="integrity",
                           reason=f"timer functions were replaced by the candidate: {', '.join(r['timers_replaced'])}")
        why = judge(Census.from_dict(integrity), meta.get("baseline_flops"))
        if why:
            return Verdict(**common, status="rejected", stage="integrity", reason=why)

        checks, worst, reasons = [], 0.0, []
        tolerance = min(meta["tolerances"]) if meta["tolerances"] else None
        for s in seeds:
            refs = load_arrays(ref_dir / f"ref_{s}.npz")
            name = r["outputs"].get(str(s))
            outs, refused = [], ""
            if name:
                try:  # a name the candidate's process wrote: only a regular file inside its scratch is read
                    with open_regular(res.scratch, str(name)) as f:
                        outs = load_arrays(f)
                except (CopyOutError, OSError, ValueError, KeyError) as exc:
                    refused = f" (its output file was refused: {exc})"
            if len(outs) != len(refs):
                check = SeedCheck(seed=s, ok=False, reason=f"{len(outs)} outputs, expected {len(refs)}{refused}")
            else:
                ms = [compare(i, o, ref, meta["out_dtypes"][i], meta["tolerances"][i])
                      for i, (o, ref) in enumerate(zip(outs, refs))]
                bad = max(ms, key=lambda m: (not m.ok, m.rel_err / m.tolerance))
                check = SeedCheck(seed=s, ok=all(m.ok for m in ms), max_rel_err=max(m.rel_err for m in ms),
                                  reason=bad.reason, bad_elements=bad.bad_elements,
                                  worst_index=list(bad.worst_index), worst_out=bad.worst_out,
                                  worst_ref=bad.worst_ref)
            checks.append(check)
            worst = max(worst, check.max_rel_err if check.max_rel_err is not None else float("inf"))
            if not check.ok:
                reasons.append(f"seed {s}: {check.reason}")
        correctness = Correctness(max_rel_err=worst, tolerance=tolerance, seeds=seeds, per_seed=checks)

        baseline = Timing.of(r["timing"]["baseline_ms"])
        kernel = Timing.of(r["timing"]["kernel_ms"])
        speedup = baseline.median_ms / kernel.median_ms if baseline and kernel and kernel.median_ms > 0 else None
        flags = []
        if r["backend"] == "cpu":
            flags.append("cpu_timing")
        if res.isolation != "bwrap":
            flags.append("degraded_sandbox")
        if speedup is not None and speedup > MAX_PLAUSIBLE_SPEEDUP:
            flags.append("speedup_over_10x")
        flags += _roofline_flags(r["backend"], meta, kernel)
        if r["backend"] == "cpu":
            label = CPU_TIMING_LABEL
        elif r["timing"].get("source") == "device":
            label = f"{r['backend']} device time from the profiler (sum of the program's device ops per run)"
        else:
            label = f"{r['backend']} wall time around block_until_ready (no device events in the profile)"
        timing = dict(baseline=baseline, kernel=kernel, speedup=speedup, flags=flags, timing_label=label)
        if r.get("races"):
            return Verdict(**common, **timing, status="incorrect", stage="run", correctness=correctness,
                           reason="the strict TPU interpreter found a data race between DMAs/accesses")
        if reasons:
            return Verdict(**common, **timing, status="incorrect", stage="compare", correctness=correctness,
                           reason="; ".join(reasons)[:2000])
        matched = f"matches the reference on {len(seeds)} seeds (worst error {worst:.3g}, tolerance {tolerance:.3g})"
        if res.isolation != "bwrap" and not self.settings.allow_unisolated:
            # Without the sandbox the candidate could have reached the harness's files: never called correct
            # unless the user accepts that (MAXKERNEL_ALLOW_UNISOLATED), so reports and searches never count it.
            return Verdict(**common, **timing, status="rejected", stage="isolation", correctness=correctness,
                           reason=f"{matched}, but it ran without isolation (isolation: none); set "
                                  "MAXKERNEL_ALLOW_UNISOLATED=1 to accept verdicts from an unisolated run")
        return Verdict(**common, **timing, status="correct", correctness=correctness, reason=matched)


class _Timing(BaseModel):
    baseline_ms: list[float]
    kernel_ms: list[float]
    source: str = "wall"


class CandidateResult(BaseModel):
    """What a candidate job that ran must return (result.json), checked before the verdict reads it."""

    model_config = ConfigDict(extra="allow")
    status: Literal["ran"]
    backend: str
    census: dict
    outputs: dict[str, str]
    compile_s: float | None = None
    run_ms: list[float] = []
    timing: _Timing
    races: Any = None
    timers_replaced: list[str] = []


def _memory_hint(log: str) -> str:
    low = log.lower()
    if "memoryerror" in low or "resource_exhausted" in low or "cannot allocate" in low or "bad_alloc" in low:
        return f"; it ran out of memory (limit {get_settings().eval_memory_mb} MiB)"
    return ""


def _roofline_flags(backend: str, meta: dict, kernel: Timing | None) -> list[str]:
    if backend == "cpu" or kernel is None:
        return []
    from maxkernel import chips

    chip = chips.detect()
    if chip is None or chip.platform == "cpu":
        return []
    bound_ms = chips.roofline_seconds(chip, meta.get("flops") or 0, meta.get("bytes") or 0) * 1e3
    return ["faster_than_roofline"] if bound_ms > 0 and kernel.median_ms < bound_ms else []


_SHARED: Evaluator | None = None
_SHARED_LOCK = threading.Lock()


def shared_evaluator() -> Evaluator:
    """A process-wide evaluator whose pool keeps workers pre-started for tools called many times."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            import atexit

            _SHARED = Evaluator(WorkerPool())
            atexit.register(_SHARED.pool.close)
    return _SHARED


def evaluate(task: str, kernel: str | Path, **kwargs) -> Verdict:
    """One evaluation with a fresh evaluator (cold workers)."""
    with Evaluator(WorkerPool(size=1)) as ev:
        return ev.evaluate(task, kernel, **kwargs)
