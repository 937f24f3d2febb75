"""The trusted verdict: the candidate runs in one sandboxed process, the judge's work (references, the baseline's
timing and error, the census of the candidate's TPU lowering) in another that never sees candidate code, and the
two are compared here. Nothing the candidate's process writes is believed beyond the arrays it computed."""

from __future__ import annotations

import re
import secrets
import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from maxkernel.harness.verdict.arrays import load_arrays
from maxkernel.harness.sandbox.copyout import CopyOutError, open_regular, read_bytes
from maxkernel.harness.sandbox.guard import jobs_guarded
from maxkernel.harness.verdict.integrity import Census, judge, judge_lowering, lowering_disagrees
from maxkernel.harness.verdict.judge_pair import JudgePair
from maxkernel.harness.verdict.judge_service import JudgeService
from maxkernel.harness.verdict.numerics import compare, fro_tolerance
from maxkernel.harness.verdict.audit import AUDIT_TIMEOUT_S, MAX_LOWERED_BYTES
from maxkernel.harness.sandbox.pool import SandboxResult, WorkerPool
from maxkernel.harness.verdict.library import library_kernels
from maxkernel.harness.verdict import small_blocks
from maxkernel.harness.sandbox.static_check import check_source
from maxkernel.harness.verdict.result import Correctness, SeedCheck, TimedCheck, Timing, Verdict
from maxkernel.settings import get_settings
from maxkernel.tasks import Task, load_task

__all__ = ["Evaluator", "evaluate", "shared_evaluator", "HarnessError", "MAX_PLAUSIBLE_SPEEDUP", "draw_seeds"]

MAX_PLAUSIBLE_SPEEDUP = 10.0
MAX_TIMED_SETS = 8  # timed calls per verdict, each on an input set of its own that the kernel sees only then
CPU_TIMING_LABEL = ("CPU wall time: the Pallas TPU interpreter against XLA:CPU; says nothing about TPU "
                    "kernel performance")
_CLOCK_SLACK_MS = 5.0  # rounding between the two processes' reads of one monotonic clock
_GAP_MS = 1.0  # the loop's own cost per timed call (clock reads, list appends), generously
# The share of a wall-clock loop's span its samples may leave unaccounted for. On a loaded machine the timing process
# is preempted between calls: an honest loop was seen leaving 29 % (20.8 of 29.4 ms, 3 samples, load average 8).
# Samples cut by the forger's factor f leave 1 - 1/f, so anything claiming 2x or more is still caught; on a CPU the
# wall time ranks nothing anyway (the TPU estimate does).
_GAP_SHARE = 0.5


JUDGE_MARGIN_S = AUDIT_TIMEOUT_S + 60.0  # the judge's time beyond the candidate's: the census's bound, timing


class HarnessError(RuntimeError):
    """The harness itself failed (not the candidate): the reference could not be computed."""


def draw_seeds(n: int) -> list[int]:
    """`n` fresh, unpredictable input seeds covering the suite's input distributions in turn (seed % 3)."""
    return [3 * secrets.randbelow(1 << 29) + i % 3 for i in range(n)]


class Evaluator:
    """Judges candidate kernels. Reuse one Evaluator (and its pool) for many evaluations.

    Three guards stop a kernel from reaching into the harness from inside its own process: the source allow-list
    (`static_check`, before the import), the audit hooks armed before the import (`guard`, harness/sandbox/guard.py) and
    the watch on the functions the harness relies on (`watch`, after the import and the run). Only tests turn them
    off, to prove the layers behind them on their own.
    """

    def __init__(self, pool: WorkerPool | None = None, *, static_check: bool = True, watch: bool = True,
                 guard: bool = True):
        self.settings = get_settings()
        self._own_pool = pool is None
        self.pool = pool or WorkerPool()
        self.judges = JudgeService(self.pool) if self.settings.persistent_judge else None
        self.static_check = static_check
        self.watch = watch
        self.guard = guard
        self._meta: dict = {}

    def close(self) -> None:
        if self.judges is not None:
            self.judges.close()
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the judge's side -------------------------------------------------------------------------------------
    def _judge_job(self, task: Task, size: str, seeds: list[int]) -> SandboxResult:
        """The judge's job on its own (no candidate beside it): the task's metadata and references."""
        spec, task_files = task.for_job()
        job = {"kind": "reference", "task": spec, "size": size, "seeds": seeds, "reps": 0}
        res = (self.judges or self.pool).run(job, dict(task_files))
        if res.status != "ok" or (res.result or {}).get("status") != "ok":
            detail = (res.result or {}).get("error") or res.stderr_tail[-1500:]
            res.cleanup()
            raise HarnessError(f"reference for {task.name} ({size}) failed: {res.status}: {detail}")
        return res

    def task_meta(self, task: str | Task, size: str) -> dict:
        """The task's declared outputs, tolerances, FLOPs and bytes at `size` (from one fresh seed; cached)."""
        task = task if isinstance(task, Task) else load_task(task)
        key = (task.name, task.digest, size)
        if key not in self._meta:
            res = self._judge_job(task, size, draw_seeds(1))
            res.cleanup()
            self._meta[key] = res.result["meta"]
        return self._meta[key]

    # -- the verdict ------------------------------------------------------------------------------------------
    def evaluate(self, task: str | Task, kernel: str | Path, *, size: str = "smoke", seeds: list[int] | None = None,
                 timeout: float | None = None, reps: int | None = None, tunables: dict | None = None,
                 detect_races: bool = True, exact_seeds: bool = False, estimate: bool | None = None) -> Verdict:
        """Judge `kernel` on fresh seeds (as many as `seeds` names; `exact_seeds=True` replays those exact ones).

        Off a TPU, a correct kernel's verdict also carries the TPU estimate for the settings' chip at full size
        (`estimate=None` follows MAXKERNEL_ESTIMATE): the measured CPU speedup and the estimate, each labelled.
        A task with several configs is judged on each (fresh seeds for each, or the replayed ones) and the
        verdicts combined (configs.py).
        """
        task_obj = task if isinstance(task, Task) else load_task(task)
        per_config = task_obj.config_sizes(size)
        if per_config:
            from maxkernel.harness.verdict.configs import combine

            return combine(size, {name: (sz, self._one(task_obj, kernel, size=sz, seeds=seeds, timeout=timeout,
                                                        reps=reps, tunables=tunables, detect_races=detect_races,
                                                        exact_seeds=exact_seeds, estimate=estimate))
                                  for name, sz in per_config.items()})
        return self._one(task_obj, kernel, size=size, seeds=seeds, timeout=timeout, reps=reps, tunables=tunables,
                         detect_races=detect_races, exact_seeds=exact_seeds, estimate=estimate)

    def _one(self, task: Task, kernel, *, size: str, seeds, timeout, reps, tunables, detect_races, exact_seeds,
             estimate) -> Verdict:
        verdict = self._judge(task, kernel, size=size, seeds=seeds, timeout=timeout, reps=reps, tunables=tunables,
                              detect_races=detect_races, exact_seeds=exact_seeds)
        verdict = _with_hint(verdict, kernel, self.settings.chip)
        settings = get_settings()  # read now, not at construction: a long-lived evaluator follows changed settings
        wanted = settings.estimate if estimate is None else estimate
        if not (wanted and verdict.status == "correct" and verdict.backend == "cpu"):
            return verdict
        from maxkernel.harness.estimate.estimator import estimate as tpu_estimate

        task_obj = task
        full = "full" + (size[size.index("@"):] if "@" in size else "")  # the estimate is at full size, per config
        est = tpu_estimate(str(task_obj.path if task_obj.source != "jaxbench" else task_obj.name), str(kernel),
                           settings.chip, full if full in task_obj.sizes else size, tunables)
        return _with_estimate(verdict, est)

    def _judge(self, task: str | Task, kernel: str | Path, *, size: str, seeds: list[int] | None,
               timeout: float | None, reps: int | None, tunables: dict | None, detect_races: bool,
               exact_seeds: bool) -> Verdict:
        t_start = time.monotonic()
        task = task if isinstance(task, Task) else load_task(task)
        kernel = Path(kernel)
        if not kernel.is_file():
            raise FileNotFoundError(f"kernel file not found: {kernel}")
        if size not in task.sizes:
            raise ValueError(f"task {task.name} has no size {size!r} (has {', '.join(task.sizes)})")
        n = len(seeds) if seeds else self.settings.eval_seeds
        drawn = [int(s) for s in seeds] if (exact_seeds and seeds) else draw_seeds(n)
        reps = min(5 if reps is None else reps, MAX_TIMED_SETS)
        from maxkernel.harness.verdict.checksize import draw as draw_check
        from maxkernel.harness.verdict.task_facts import draw_remote

        check = draw_check(task, size) if not task.described else draw_remote(task, size)
        if check:
            check = {**check, "seed": draw_seeds(1)[0]}
        timing_seeds = draw_seeds(reps) if reps > 0 else []
        source = kernel.read_bytes()
        base = dict(task=task.name, kernel_file=str(kernel), size=size, isolation=self.pool_isolation(),
                    passed_env=self.settings.sandbox_env_names,
                    correctness=Correctness(seeds=drawn, seeds_drawn="replayed" if exact_seeds and seeds else "fresh"))
        text = source.decode("utf-8", errors="replace")
        library = ", ".join(library_kernels(text))
        base["uses_library_kernel"] = library
        if self.static_check:
            why = check_source(text, kernel.name)
            if not why and library and not self.settings.allow_library_kernels:
                why = (f"{kernel.name}: uses the library kernel {library}; library kernels are not allowed here "
                       "(MAXKERNEL_ALLOW_LIBRARY_KERNELS=false): write the kernel with pl.pallas_call")
            if why:
                return Verdict(**base, status="rejected", stage="static", reason=why,
                               wall_s=time.monotonic() - t_start)

        spec, task_files = task.for_job()
        job = {"kind": "candidate", "task": spec, "size": size, "inputs": len(drawn), "kernel": "kernel.py",
               "tunables": tunables or {}, "reps": reps, "time_budget_s": 2.0, "detect_races": detect_races,
               "watch": self.watch, "guard": self.guard and jobs_guarded(), "timing_inputs": len(timing_seeds),
               "check": {k: check[k] for k in ("size", "dims")} if check else None,
               "small_blocks": small_blocks.candidates(text, tunables),
               "fingerprint_chip": self.settings.chip}
        judge_job = {"kind": "reference", "task": spec, "size": size, "seeds": drawn, "reps": reps,
                     "time_budget_s": 2.0, "wait": True, "check": check, "timing_seeds": timing_seeds}
        pair = JudgePair(self.pool, self.judges)
        t_sub = time.monotonic()
        # The judge outlives the candidate by the baseline's timing and the census's bound, and no more: a judge
        # that hangs costs the verdict that long (an error verdict), never the caller's whole wait.
        pair.start("judge", judge_job, dict(task_files), (timeout or self.settings.eval_timeout_s) + JUDGE_MARGIN_S)
        pair.start("candidate", job, {"kernel.py": source, **task_files}, timeout or self.settings.eval_timeout_s)
        try:
            ready = pair.hand_inputs(len(drawn), check=bool(check), timing=len(timing_seeds))
            res = pair.finish("candidate")
            window = (t_sub, time.monotonic())
            verdict = self._early(res, base)
            if verdict is not None and res.status == "timeout" and not pair.inputs_made:
                # A candidate stuck before its inputs and a judge too slow to make them look the same from here.
                verdict = verdict.model_copy(update={"reason": verdict.reason + " (the judge had not made its inputs "
                                                     "either: its job was ended too)"})
            lowered = None
            if verdict is None:
                lowered = self._lowered(res)
                pair.release_judge(time_it=reps > 0, lowered=lowered)
            else:
                pair.abandon("judge")  # nothing of the judge's is needed for an import error or a crash
            if verdict is None or not ready:
                ref = pair.finish("judge")
                if not ready or ref.status != "ok" or (ref.result or {}).get("status") != "ok":
                    verdict = _judge_failed(ref, base, f"{task.name} ({size})", read_lowering=lowered is not None)
                else:
                    verdict = self._guarded(res, ref, window, base)
            elif _interpreter_failure(verdict, res.result):
                verdict = self._unverifiable(verdict, task, size, source, task_files, tunables)
        finally:
            pair.close()
        wall = time.monotonic() - t_start
        own = None
        if verdict.kernel is not None and verdict.status != "error":
            r = res.result
            own = ((r.get("compile_s") or 0.0) + sum(r.get("run_ms") or []) / 1e3 + sum(verdict.kernel.samples_ms) / 1e3
                   + (sum(verdict.baseline.samples_ms) / 1e3 if verdict.baseline else 0.0))
        return verdict.model_copy(update={"wall_s": wall, "overhead_s": None if own is None else max(wall - own, 0.0)})

    def _unverifiable(self, verdict: Verdict, task: Task, size: str, source: bytes, task_files: dict,
                      tunables: dict | None) -> Verdict:
        """The interpreter failed inside its own code: if the kernel compiles for a v5e, say it needs hardware."""
        spec, _ = task.for_job()
        job = {"kind": "compile", "task": spec, "kernel": "kernel.py", "chip": "v5e", "size": size,
               "tunables": tunables or {}, "guard": self.guard and jobs_guarded()}
        res = self.pool.run(job, {"kernel.py": source, **task_files})
        try:
            r = res.result if res.status == "ok" and isinstance(res.result, dict) else {}
        finally:
            res.cleanup()
        if r.get("ok") is not True:
            return verdict
        took = r.get("compile_s")
        return verdict.model_copy(update={
            "status": "unverifiable_on_cpu",
            "reason": f"jax's TPU interpreter cannot run this kernel ({verdict.reason[:600]}), but it compiles for "
                      f"v5e (Mosaic + XLA:TPU{f', {took:.2f} s' if isinstance(took, (int, float)) else ''}): "
                      "its correctness needs a TPU to be checked",
            "detail": verdict.detail})

    def pool_isolation(self) -> str:
        from maxkernel.harness.sandbox.pool import isolation_mode

        return isolation_mode()

    @staticmethod
    def _lowered(res: SandboxResult) -> bytes | None:
        name = (res.result or {}).get("lowered_tpu")
        if name != "lowered_tpu.mlir":  # only the name this harness gave it
            return None
        try:
            return read_bytes(res.scratch, name, MAX_LOWERED_BYTES)
        except CopyOutError:
            return None

    def _early(self, res: SandboxResult, base: dict) -> Verdict | None:
        """The verdict when the candidate's job did not run to the end (or returned garbage); else None."""
        try:
            return self._early_checked(res, base)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            return _malformed(base, f"{type(exc).__name__}: {str(exc)[:200]}")

    def _early_checked(self, res: SandboxResult, base: dict) -> Verdict | None:
        if res.result and res.result.get("status") == "ran":
            try:  # written inside the candidate's process: its shape is checked before any field is used
                res.result = CandidateResult.model_validate(res.result).model_dump()
            except ValidationError as exc:
                first = exc.errors()[0]
                return _malformed(base, f"{'.'.join(str(x) for x in first['loc'])}: {first['msg']}")
        if "scratch" in res.limits_hit:
            return Verdict(**base, status="error", stage="sandbox",
                           reason=f"the candidate filled its scratch folder (the {self.settings.sandbox_scratch_mb} MiB cap)")
        if "pids" in res.limits_hit:
            from maxkernel.harness.sandbox.pool import max_pids

            return Verdict(**base, status="error", stage="sandbox",
                           reason=f"the candidate hit the sandbox's process limit ({max_pids()} processes and threads)")
        r = res.result or {}
        if res.status == "timeout":
            return Verdict(**base, status="timeout", stage="sandbox",
                           reason=f"the candidate did not finish within {res.wall_s:.0f} s; its process group was killed",
                           detail=res.stderr_tail[-2000:])
        if res.status == "crashed":
            return Verdict(**base, status="error", stage="sandbox",
                           reason=f"the candidate process died without a result ({res.death()})"
                                  + _memory_hint(res.stderr_tail),
                           detail=res.stderr_tail[-2000:])
        status = r.get("status")
        if status in ("bad_output", "bad_trace"):
            return Verdict(**base, status="rejected", stage="outputs" if status == "bad_output" else "trace",
                           reason=str(r.get("error", ""))[:2000], backend=str(r.get("backend", "")))
        if status != "ran":
            return Verdict(**base, status="error", stage=str(r.get("stage", "worker")),
                           reason=str(r.get("error", "unknown error"))[:2000], detail=str(r.get("traceback", ""))[-2000:],
                           integrity=r.get("census") if isinstance(r.get("census"), dict) else {},
                           backend=str(r.get("backend", "")))
        return None

    def _guarded(self, res: SandboxResult, ref: SandboxResult, window: tuple, base: dict) -> Verdict:
        try:
            return self._decide(res, ref, window, base)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            return _malformed(base, f"{type(exc).__name__}: {str(exc)[:200]}")

    def _decide(self, res: SandboxResult, ref: SandboxResult, window: tuple, base: dict) -> Verdict:
        r, j = res.result, ref.result
        meta = j["meta"]
        audit = j.get("audit")
        integrity = dict(r["census"])
        if isinstance(audit, dict) and "error" not in audit:
            heavy, outside = float(audit.get("pallas_flops_max") or 0), float(audit.get("outside_flops") or 0)
            # pallas_share counts every branch at its lightest (work that may not run is not credit);
            # pallas_share_max at its heaviest, for kernels that skip work by design (causal attention).
            integrity.update(lowering=audit, census_source="tpu_lowering", pallas_share=audit.get("pallas_share"),
                             pallas_share_max=round(heavy / (heavy + outside), 4) if heavy + outside else 0.0)
        else:
            integrity.update(census_source="candidate_jaxpr",
                             lowering_error=(audit or {}).get("error") or r.get("export_error") or "not lowered")
        # The backend is the judge's (the same pool, the same machine), never the candidate's word for it.
        backend = meta.get("backend") or r["backend"]
        common = dict(base, integrity=integrity, backend=backend, compile_s=r.get("compile_s"))
        if r["backend"] != backend:
            return Verdict(**common, status="rejected", stage="integrity",
                           reason=f"the candidate's process says it ran on {r['backend']!r}; the judge beside it runs "
                                  f"on {backend!r}: its report is not to be believed")
        if r.get("timers_replaced"):
            return Verdict(**common, status="rejected", stage="integrity",
                           reason="the kernel replaced functions the harness relies on while it runs and times it: "
                                  + ", ".join(r["timers_replaced"])[:1500])
        integrity.update(fingerprints=r.get("fingerprints") or {}, kernels=r.get("kernels") or [])
        if isinstance(audit, dict) and audit.get("timed_out"):
            # Not the kernel's verdict: on a loaded machine an honest census ran past its bound (a hostile nesting
            # gains nothing from this either: an error is never correct, and the next try bounds it again).
            return Verdict(**common, status="error", stage="census",
                           reason=f"not judged: {audit['error']} (a loaded machine, or a deeply nested TPU lowering); "
                                  "the census decides, so evaluate again")
        if integrity["census_source"] == "tpu_lowering":
            why = (_signature_problem(audit, meta) or lowering_disagrees(r.get("kernels") or [], audit.get("kernels") or [])
                   or judge_lowering(audit, meta))
        elif backend == "cpu":
            why = judge(Census.from_dict(r["census"]), meta.get("baseline_flops")) or (
                  f"the kernel does not lower for TPU ({integrity['lowering_error'][:300]}): the census that "
                  "decides runs on the TPU lowering, in a process that never imports the kernel")
        else:
            why = judge(Census.from_dict(r["census"]), meta.get("baseline_flops"))
        if why:
            return Verdict(**common, status="rejected", stage="integrity", reason=why)

        correctness, reasons = self._correctness(res, ref, meta, base["correctness"].seeds,
                                                 base["correctness"].seeds_drawn)
        common["correctness"] = correctness
        baseline = Timing.of(j["timing"]["baseline_ms"])
        kernel = Timing.of(r["timing"]["kernel_ms"])
        speedup = baseline.median_ms / kernel.median_ms if baseline and kernel and kernel.median_ms > 0 else None
        flags = []
        if backend == "cpu":
            flags.append("cpu_timing")
        if res.isolation != "bwrap":
            flags.append("degraded_sandbox")
        if backend == "cpu":
            label = CPU_TIMING_LABEL
        elif r["timing"].get("source") == "device":
            label = f"{r['backend']} device time from the profiler (sum of the program's device ops per run)"
        else:
            label = f"{r['backend']} wall time around block_until_ready (no device events in the profile)"
        timing = dict(baseline=baseline, kernel=kernel, speedup=speedup, flags=flags, timing_label=label)
        if r.get("races"):
            return Verdict(**common, **timing, status="incorrect", stage="run",
                           reason="the strict TPU interpreter found a data race between DMAs/accesses")
        if reasons:
            return Verdict(**common, **timing, status="incorrect", stage="compare",
                           reason="; ".join(reasons)[:2000])
        unscorable = (_clock_problem("kernel", r["timing"], window)
                      or _clock_problem("baseline", {"kernel_ms": j["timing"]["baseline_ms"], **j["timing"]}, None,
                                        judge=True)
                      or _implausible(backend, meta, kernel, speedup))
        if unscorable:
            return Verdict(**common, **timing, status="rejected", stage="timing",
                           reason=unscorable)
        worst = correctness.max_rel_err or 0.0
        matched = (f"matches the reference on {len(correctness.seeds)} {correctness.seeds_drawn} seeds (worst error {worst:.3g}, "
                   f"tolerance {correctness.tolerance:.3g}; Frobenius {correctness.max_fro_err:.3g}, "
                   f"bound {correctness.fro_tolerance:.3g})")
        if res.isolation != "bwrap" and not self.settings.allow_unisolated:
            # Without the sandbox the candidate could have reached the harness's files: never called correct
            # unless the user accepts that (MAXKERNEL_ALLOW_UNISOLATED), so reports and searches never count it.
            return Verdict(**common, **timing, status="rejected", stage="isolation",
                           reason=f"{matched}, but it ran without isolation (isolation: none); set "
                                  "MAXKERNEL_ALLOW_UNISOLATED=1 to accept verdicts from an unisolated run")
        return Verdict(**common, **timing, status="correct", reason=matched)

    def _correctness(self, res: SandboxResult, ref: SandboxResult, meta: dict, seeds: list[int], drawn_how: str):
        """Every input set's outputs, and every timed repetition's, against the judge's references."""
        r = res.result
        dtypes, tols = meta["out_dtypes"], meta["tolerances"]
        calib = meta.get("baseline_errors") or [{} for _ in dtypes]
        fro_tols = [fro_tolerance(d, c.get("fro")) for d, c in zip(dtypes, calib)]
        refs = [load_arrays(_open(ref.scratch, f"ref_{i}.npz")) for i in range(len(seeds))]

        checks, reasons = [], []
        check_meta, check_row = meta.get("check"), None
        if check_meta:  # the drawn second size: its own references and XLA's own error there
            cal = check_meta.get("baseline_errors") or [{} for _ in dtypes]
            c_refs = load_arrays(_open(ref.scratch, "check_ref.npz"))
            c_fro = [fro_tolerance(d, c.get("fro")) for d, c in zip(dtypes, cal)]
            check_row = self._seed_check(res, r.get("check_output"), "check_out.npz", c_refs, int(check_meta["seed"]),
                                         dtypes, tols, c_fro)
            if r.get("check_error"):
                check_row = SeedCheck(seed=int(check_meta["seed"]), ok=False,
                                      reason=f"the kernel fails there: {str(r['check_error'])[:1500]}")
            if not check_row.ok:
                dims = ", ".join(f"{k}={v}" for k, v in sorted(check_meta["dims"].items()))
                reasons.append(f"at the check size ({dims}), seed {check_row.seed}: {check_row.reason}")
        for i in range(len(seeds)):  # fixed names this harness chose, read without following links, size-capped
            name = f"out_{i}.npz"
            c = self._seed_check(res, name if name in r["outputs"] else None, name, refs[i], seeds[i], dtypes, tols,
                                 fro_tols)
            checks.append(c)
            if not c.ok:
                reasons.append(f"seed {seeds[i]}: {c.reason}")
        small = {k: v for k, v in (r.get("small_blocks") or {}).items() if v not in (None, "")}
        if small.get("config"):  # the first input set again, with the kernel's smallest declared blocks
            name = "small_out.npz"
            c = (SeedCheck(seed=seeds[0], ok=False, reason=f"the kernel fails there: {str(small['error'])[:1500]}")
                 if small.get("error") else
                 self._seed_check(res, name if small.get("output") == name else None, name, refs[0], seeds[0],
                                  dtypes, tols, fro_tols))
            small.update(ok=c.ok, **({} if c.ok else {"reason": c.reason}))
            if not c.ok and not reasons:  # named only where the default blocks pass: the failure it adds
                reasons.append(f"with its smallest declared tunables ({small_blocks.describe(small['config'])}: "
                               f"{small['steps']} grid steps where the defaults take {small['default_steps']}), "
                               f"seed {seeds[0]}: {c.reason}")
        timed = []
        timing_seeds = meta.get("timing_seeds") or []
        for k, rep in enumerate(r["timing"].get("reps") or []):
            i = int(rep["input"])
            if i != k or not 0 <= i < len(timing_seeds):  # each call on its own set, in order
                raise ValueError(f"timed repetition {k} names input set {i}")
            if rep.get("file") != f"timed_{k}.npz":
                timed.append(TimedCheck(rep=k, input=i, checked="not shipped", ok=False))
                reasons.append(f"timed repetition {k} did not hand over its outputs")
                continue
            t_refs = load_arrays(_open(ref.scratch, f"timing_ref_{i}.npz"))
            c = self._seed_check(res, rep["file"], rep["file"], t_refs, int(timing_seeds[i]), dtypes, tols, fro_tols)
            timed.append(TimedCheck(rep=k, input=i, checked="fresh inputs; compared with the reference", ok=c.ok))
            if not c.ok:
                reasons.append(f"timed repetition {k} (inputs it had not seen): {c.reason}")
        samples = len(r["timing"].get("kernel_ms") or [])
        if len(r["timing"].get("reps") or []) != samples:  # a sample whose outputs nobody checked counts for nothing
            reasons.append(f"the timing reports {samples} samples but hands over the outputs of "
                           f"{len(r['timing'].get('reps') or [])} timed calls")
        finite = [c.max_rel_err for c in checks if c.max_rel_err is not None]
        fros = [c.fro_err for c in checks if c.fro_err is not None]
        rows = [c for c in [*checks, check_row] if c is not None]
        # Each error beside its own output's bound: the worst error and the tightest bound can be two outputs'.
        worst = max((c for c in rows if c.max_rel_err is not None and c.tolerance is not None),
                    key=lambda c: c.max_rel_err, default=None)
        worst_fro = max((c for c in rows if c.fro_err is not None and c.fro_tolerance is not None),
                        key=lambda c: c.fro_err, default=None)
        correctness = Correctness(
            max_rel_err=max(finite) if len(finite) == len(checks) else float("inf"),
            tolerance=worst.tolerance if worst else (min(tols) if tols else None),
            max_fro_err=max(fros) if fros else None,
            fro_tolerance=worst_fro.fro_tolerance if worst_fro else
            min((t for t in fro_tols if t is not None), default=None),
            baseline_errors=calib, seeds=seeds, seeds_drawn=drawn_how, per_seed=checks, timed=timed,
            check_size=dict(check_meta["dims"]) if check_meta else {}, check=check_row, small_blocks=small)
        if check_row is not None and check_row.max_rel_err is not None and correctness.max_rel_err is not None:
            # The worst error is over every set checked, the check size's included.
            correctness = correctness.model_copy(update={
                "max_rel_err": max(correctness.max_rel_err, check_row.max_rel_err),
                "max_fro_err": max(correctness.max_fro_err or 0.0, check_row.fro_err or 0.0)})
        return correctness, reasons

    @staticmethod
    def _seed_check(res: SandboxResult, named: str | None, name: str, refs: list, seed: int, dtypes, tols,
                    fro_tols) -> SeedCheck:
        """One input set's outputs (the file this harness named, read without following links) against refs."""
        outs, refused = [], ""
        if named != name:
            refused = " (no outputs handed over)" if named is None else f" (it named {named!r})"
        else:
            try:
                with open_regular(res.scratch, name) as f:
                    outs = load_arrays(f)
            except (CopyOutError, OSError, ValueError, KeyError) as exc:
                refused = f" (its output file was refused: {exc})"
        if len(outs) != len(refs):
            return SeedCheck(seed=seed, ok=False, reason=f"{len(outs)} outputs, expected {len(refs)}{refused}")
        ms = [compare(k, o, rr, dtypes[k], tols[k], fro_tols[k]) for k, (o, rr) in enumerate(zip(outs, refs))]
        bad = max(ms, key=lambda m: (not m.ok, m.rel_err / m.tolerance))
        worst, worst_fro = max(ms, key=lambda m: m.rel_err), max(ms, key=lambda m: m.fro_err)
        return SeedCheck(seed=seed, ok=all(m.ok for m in ms), max_rel_err=worst.rel_err, tolerance=worst.tolerance,
                         fro_err=worst_fro.fro_err, fro_tolerance=worst_fro.fro_tolerance,
                         reason=bad.reason, bad_elements=bad.bad_elements,
                         worst_index=list(bad.worst_index), worst_out=bad.worst_out, worst_ref=bad.worst_ref)


ROOFLINE_CLAIM = 0.95  # an estimate this close to its floor, on a task whose XLA program stays well short of it


def _judge_failed(ref: SandboxResult, base: dict, what: str, *, read_lowering: bool) -> Verdict:
    """The verdict when the judge's job failed: the judge died while reading the candidate's TPU lowering
    (`rejected`: that text is the candidate's), or it failed on its own (`error`: no verdict on the kernel). Either
    way the judge that failed serves no later verdict."""
    detail = str((ref.result or {}).get("error") or ref.stderr_tail[-1500:])
    if read_lowering and ref.status == "crashed":
        return Verdict(**base, status="rejected", stage="census",
                       reason="the judge died while reading this kernel's TPU lowering (a lowering that crashes the "
                              "census is refused, not judged)", detail=detail[-2000:])
    return Verdict(**base, status="error", stage="judge",
                   reason=f"the judge's job for {what} failed ({ref.status}): no verdict on the kernel; the next "
                          "verdict gets a fresh judge", detail=detail[-2000:])


def plausible_estimated_speedup(est) -> float:
    """The largest estimated speedup a verdict believes: MAX_PLAUSIBLE_SPEEDUP, or, where XLA's own program is priced
    further than that above the task's roofline floor, what running at that floor would gain (a few percent over it
    for the estimate's grain). rw_rglru_scan's kernel was estimated 39x XLA, whose program runs the recurrence as a
    4096-step loop 40x above the floor; a kernel estimated below the floor is still refused by this bound."""
    base_ms, floor_ms = est.baseline_estimated_ms, est.roofline_ms
    if not base_ms or not floor_ms or floor_ms <= 0:
        return MAX_PLAUSIBLE_SPEEDUP
    return max(MAX_PLAUSIBLE_SPEEDUP, 1.05 * base_ms / floor_ms)


def _with_estimate(verdict: Verdict, est) -> Verdict:
    """Attach the TPU estimate, but only to the program that was checked: the kernels priced at full size (and at
    every shrunk profiling size) must print the checked program's fingerprint (integrity.fingerprint), or the
    estimate is withheld and the kernel is not ranked. An impossible estimated speedup is rejected as a measured
    one is; a kernel estimated at its roofline floor where XLA's program is far from it is flagged."""
    from maxkernel.harness.verdict.integrity import priced_differs

    data = est.model_dump(exclude={"kernel", "baseline"})
    priced = ((est.kernel.fit or {}).get("fingerprints") if est.kernel is not None else None) or []
    flags = list(verdict.flags)
    if est.ok:
        why = priced_differs(verdict.integrity.get("fingerprints") or {}, priced)
        if why:
            flags.append("size_dependent_program")
            return verdict.model_copy(update={"flags": flags, "estimate": {
                "ok": False, "stage": "program", "chip": est.chip, "size": est.size, "label": est.label,
                "error": f"not estimated: the program priced at {est.size} size is not the program whose outputs were "
                         f"checked ({why}); a kernel that changes with the size is not ranked",
                "summary": f"No TPU estimate: the program changes with the size ({why})."}})
        speedup, limit = est.speedup_estimate, plausible_estimated_speedup(est)
        if speedup is not None and speedup > limit:
            return verdict.model_copy(update={"estimate": data, "status": "rejected", "stage": "estimate",
                                              "reason": f"{verdict.reason}; but an estimated {speedup:.0f}x TPU speedup "
                                                        f"over XLA is beyond what a kernel can honestly gain here (the "
                                                        f"limit is {limit:.3g}x): not scored"})
        base = est.baseline
        if ((est.fraction_of_roofline or 0) >= ROOFLINE_CLAIM and base is not None and base.ok
                and (base.fraction_of_roofline or 0) < 0.5 * ROOFLINE_CLAIM):
            flags.append("claims_roofline_floor")
    return verdict.model_copy(update={"estimate": data, "flags": flags})


def _signature_problem(audit: dict, meta: dict) -> str | None:
    """Why the lowering handed over is not a program over this task's inputs and outputs (the judge's own shapes)."""
    sig = audit.get("signature") or {}
    got_in = [[d for d in t if isinstance(d, int)] for t in sig.get("inputs") or []]
    got_out = [[d for d in t if isinstance(d, int)] for t in sig.get("outputs") or []]
    want_in, want_out = meta.get("in_shapes"), meta.get("out_shapes")
    remaining = [list(x) for x in want_in or []]
    for shape in got_in:  # jit drops inputs a program never reads: the lowering takes some of the task's inputs
        if shape in remaining:
            remaining.remove(shape)
        else:
            remaining = None
            break
    if want_in is not None and remaining is None:
        return (f"the TPU lowering handed to the judge takes inputs {got_in}, not the task's {want_in}: it is not the "
                "program that ran")
    if want_out is not None and got_out != [list(x) for x in want_out]:
        return (f"the TPU lowering handed to the judge returns {got_out}, not the task's {want_out}: it is not the "
                "program that ran")
    return None


def _interpreter_failure(verdict: Verdict, result: dict | None) -> bool:
    """An error raised inside jax's TPU interpreter itself (not an out-of-bounds access it caught) on a CPU."""
    r = result if isinstance(result, dict) else {}
    return (verdict.status == "error" and verdict.stage in ("compile", "run") and r.get("backend") == "cpu"
            and r.get("in_interpreter") is True and not verdict.reason.startswith(("IndexError", "FloatingPointError")))


def _open(scratch: Path, name: str):
    try:
        return open_regular(scratch, name)
    except CopyOutError as exc:
        raise HarnessError(f"the judge's reference {name} was not taken: {exc}") from None


def _malformed(base: dict, what: str) -> Verdict:
    return Verdict(**base, status="error", stage="sandbox",
                   reason=f"the candidate's process returned a malformed result ({what})")


def _clock_problem(what: str, timing: dict, window: tuple | None, *, judge: bool = False) -> str | None:
    """Why the reported samples cannot be true on the parent's clock (CLOCK_MONOTONIC, shared across processes).

    The timed calls run back to back, so wall-clock samples must fill most of the loop's span; device samples (from a
    profile) must fit inside it. The span itself must lie inside the job as the parent saw it. The judge's own
    samples (`judge`: the baseline, timed in its process once the candidate's is gone) can be blurred by load but
    never forged, so a gap in them is not held against the candidate.
    """
    samples = timing.get("kernel_ms") or []
    if not samples:
        return None
    span = timing.get("window")
    if not span or len(span) != 2:
        return f"the {what} timing came without its clock window"
    start, end = float(span[0]), float(span[1])
    total, took = sum(samples), (end - start) * 1e3
    if total > took + _CLOCK_SLACK_MS or min(samples) <= 0:
        return (f"the {what} samples ({total:.1f} ms in all) do not fit in the {took:.1f} ms the timed loop took: "
                "the timing was forged")
    if not judge and timing.get("source", "wall") == "wall" and took - total > max(_GAP_SHARE * took,
                                                                                 len(samples) * _GAP_MS):
        return (f"the {what} samples ({total:.1f} ms in all) account for too little of the {took:.1f} ms the timed "
                "loop took: the timing was forged")
    if window is not None and not (window[0] - 1e-3 <= start <= end <= window[1] + 1e-3):
        return f"the {what} timing window lies outside the job's own run on the harness's clock: the timing was forged"
    return None


def _implausible(backend: str, meta: dict, kernel: Timing | None, speedup: float | None) -> str | None:
    if speedup is not None and speedup > MAX_PLAUSIBLE_SPEEDUP:
        return (f"a {speedup:.0f}x speedup over XLA is beyond what a kernel can honestly gain here (the limit is "
                f"{MAX_PLAUSIBLE_SPEEDUP:g}x): not scored")
    if "faster_than_roofline" in _roofline_flags(backend, meta, kernel):
        return "faster than the chip's roofline allows for this task's FLOPs and bytes: not scored"
    return None


class _Rep(BaseModel):
    input: int
    same_as_checked: bool = False
    file: str | None = None


class _Timing(BaseModel):
    kernel_ms: list[float]
    source: Literal["wall", "device"] = "wall"
    window: list[float] | None = None
    reps: list[_Rep] = []


class _Small(BaseModel):
    """What the candidate's process says of the small-blocks check (a hostile process can only skip it)."""

    model_config = ConfigDict(extra="forbid")
    config: dict[str, int] | None = None
    steps: int = 0
    default_steps: int = 0
    output: str | None = None
    error: str | None = None
    skipped: str | None = None


class CandidateResult(BaseModel):
    """What a candidate job that ran must return (result.json), checked before the verdict reads it."""

    model_config = ConfigDict(extra="forbid")
    status: Literal["ran"]
    backend: str
    census: dict
    kernels: list[dict] = []
    fingerprints: dict = {}
    outputs: list[str]
    check_output: str | None = None
    check_error: str | None = None
    small_blocks: _Small = _Small()
    compile_s: float | None = None
    run_ms: list[float] = []
    timing: _Timing
    races: bool | None = None
    timers_replaced: list[str] = []
    lowered_tpu: str | None = None
    export_error: str | None = None


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
    """One evaluation with a fresh evaluator (two cold workers, started together: the candidate's and the judge's).
    The pool is closed on the way out, whatever happens: a cancelled or failed evaluation's traceback must not keep
    its folder."""
    with WorkerPool(size=1 if get_settings().persistent_judge else 2) as pool, Evaluator(pool) as ev:
        return ev.evaluate(task, kernel, **kwargs)


def _with_hint(verdict: Verdict, kernel, chip: str) -> Verdict:
    """The verdict with the hint for its failure (from the reason, the detail and the per-seed mismatches, with
    the kernel's source for the line), or on a correct verdict the first lint finding. The source is the file
    the judge holds, not anything the candidate's process reported."""
    from maxkernel.harness.hints.diagnose import diagnose, lint, overhang

    try:
        source = Path(kernel).read_text(errors="replace")
    except (OSError, TypeError):
        source = None
    if verdict.status == "correct":
        findings = lint(source) if source else []
        found = findings[0] if findings else None
    else:
        text = "\n".join([verdict.reason, verdict.detail] + [c.reason for c in verdict.correctness.per_seed if not c.ok])
        found = diagnose(text, chip, source)
        overhangs = verdict.integrity.get("overhangs") or []
        if found is not None and found.family == "nan_output":  # no cause named in the source: a block past the end?
            found = overhang(overhangs) or found
        elif found is not None and found.family == "index_map_out_of_bounds":  # stepping by a block the array lacks
            oob = re.search(r'Out-of-bounds block index \([\d, ]+\) for (?:input|output) "(\w+)"', text)
            found = overhang(overhangs, oob.group(1) if oob else "") or found
    if found is None:
        return verdict
    return verdict.model_copy(update={"hint": found.hint, "hint_family": found.family, "hint_line": found.line})
