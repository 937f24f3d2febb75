"""The persistent judge: long-lived sandboxed workers that keep JAX imported and serve the judge's side of many
verdicts, one job at a time, each in a fresh subfolder of the judge's scratch.

The judge never runs candidate code. What it reads from a candidate (the TPU lowering, for the census) is bounded
inside the job, and a judge that crashes, overruns its timeout or leaves a thread running costs that one verdict
and no more: it is killed (or retires itself) and the next verdict gets a fresh one. Candidate workers stay one per
verdict and fresh (harness/sandbox/pool.py's pool).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import weakref
from pathlib import Path

from maxkernel.harness.sandbox import cancel
from maxkernel.harness.sandbox.pool import SandboxResult, Worker, WorkerPool, log_job, copy_files, read_result
from maxkernel.settings import get_settings

__all__ = ["JudgeService", "JudgeJob", "MAX_JOBS"]

MAX_JOBS = 200  # a judge retires after this many jobs: whatever JAX caches grow by stays bounded
_POLL_S = 0.005


class _Judge:
    """One started judge worker, how many jobs it has taken, and whether it may take more."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self.jobs = 0
        self.retired = False

    def alive(self) -> bool:
        return self.worker.proc.poll() is None


class JudgeJob:
    """One job on a persistent judge, what a JudgePair holds as the judge's worker for one verdict: its scratch is
    the job's own subfolder; `kill()` ends the job by ending the judge (the next verdict starts a fresh one)."""

    def __init__(self, service: "JudgeService", judge: _Judge, scratch: Path, log_from: int):
        self.service = service
        self.judge = judge
        self.scratch = scratch
        self.log_from = log_from
        self.cancel_scope = None

    @property
    def proc(self):
        return self.judge.worker.proc

    def kill(self) -> None:
        self.service.retire(self.judge)

    def stderr_tail(self, limit: int = 4000) -> str:
        """This job's part of the judge's log (what the jobs before it printed is not its business)."""
        try:
            with open(self.judge.worker.log, "rb") as f:
                f.seek(max(self.log_from, f.seek(0, 2) - (64 << 10)))
                return f.read().decode(errors="replace")[-limit:]
        except OSError:
            return ""

    def discard(self) -> None:
        """Remove the job's subfolder; a retired judge's whole scratch goes with its last job."""
        if self.cancel_scope is not None:
            self.cancel_scope.release(self)
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self.judge.retired:
            self.service.drop(self.judge)


def _kill_all(judges: list) -> None:
    for judge in list(judges):
        judge.worker.discard()
    judges.clear()


def _log_size(worker: Worker) -> int:
    try:
        return worker.log.stat().st_size
    except OSError:
        return 0


class JudgeService:
    """Persistent judges for one pool: `run(job, files, timeout, on_start)` is `WorkerPool.run` for the judge's
    job (the `reference` kind only). An idle judge is reused; a busy one is never shared, so verdicts running side
    by side get a judge each, and at most `keep` idle ones are kept."""

    def __init__(self, pool: WorkerPool, keep: int = 2, max_jobs: int = MAX_JOBS):
        self.pool = pool
        self.keep = keep
        self.max_jobs = max_jobs
        self._idle: list[_Judge] = []
        self._all: list[_Judge] = []
        self._lock = threading.Lock()
        self._closed = False
        self.started = 0  # judges started so far (tests and benchmarks read it)
        self._finalizer = weakref.finalize(self, _kill_all, self._all)
        if pool.size > 0:  # a pool that pre-starts its workers gets its first judge started too (it imports meanwhile)
            self._idle.append(self._start())

    def _start(self) -> _Judge:
        judge = _Judge(self.pool.start_serving_worker())
        with self._lock:
            self._all.append(judge)
            self.started += 1
        return judge

    def _take(self) -> _Judge:
        with self._lock:
            while self._idle:
                judge = self._idle.pop()
                if judge.alive():
                    return judge
                judge.retired = True
                self._drop_locked(judge)
        return self._start()

    def _drop_locked(self, judge: _Judge) -> None:
        judge.worker.discard()
        if judge in self._all:
            self._all.remove(judge)

    def drop(self, judge: _Judge) -> None:
        """Kill `judge` and remove its scratch folder (once nothing of it is still being read)."""
        with self._lock:
            self._drop_locked(judge)

    def retire(self, judge: _Judge) -> None:
        """Kill `judge`; it serves nothing more (its folder goes with its last job's cleanup)."""
        judge.retired = True
        judge.worker.kill()

    def _give_back(self, judge: _Judge) -> None:
        with self._lock:
            if not self._closed and judge.alive() and judge.jobs < self.max_jobs and len(self._idle) < self.keep:
                self._idle.append(judge)
                return
        self.retire(judge)

    def run(self, job: dict, files: dict | None = None, timeout: float | None = None, on_start=None,
            refill: bool = True) -> SandboxResult:
        """The judge's `job` on a persistent judge, `files` copied into the job's folder first; `on_start(job)` as
        for `WorkerPool.run`. A judge that dies or overruns `timeout` is killed: status crashed or timeout."""
        del refill  # the judge is not one of the pool's single-use workers
        if job.get("kind") != "reference":
            raise ValueError(f"a persistent judge serves the judge's job only, not {job.get('kind')!r}")
        scope = cancel.current()
        if scope is not None:
            scope.check()
        judge = self._take()
        scratch = judge.worker.scratch / f"job-{judge.jobs}"
        judge.jobs += 1
        handle = JudgeJob(self, judge, scratch, _log_size(judge.worker))
        try:
            scratch.mkdir()
            copy_files(scratch, files or {})
            if scope is not None:
                scope.adopt(handle)  # a cancel kills the judge serving the call (raises here if already cancelled)
                scope.event(f"judge job {job['kind']} started")
            if on_start is not None:
                on_start(handle)
        except BaseException:  # a file that would not copy, a cancel: the judge taken for it serves nothing more
            self.retire(judge)
            handle.discard()
            raise
        t0 = time.monotonic()
        deadline = t0 + (timeout or get_settings().eval_timeout_s)
        status = "ok"
        try:
            judge.worker.proc.stdin.write(json.dumps({**job, "dir": scratch.name}).encode() + b"\n")
            judge.worker.proc.stdin.flush()
        except (OSError, ValueError):  # the judge is gone (or its pipe closed by a kill)
            status = "crashed"
        done = scratch / "result.json"
        while status == "ok" and not done.exists():
            if not judge.alive():
                status = "crashed" if not done.exists() else "ok"
            elif time.monotonic() > deadline:
                status = "timeout"
            else:
                time.sleep(_POLL_S)
        wall = time.monotonic() - t0
        if scope is not None:
            scope.release(handle)
            if scope.cancelled:
                self.retire(judge)
                handle.discard()
                scope.check()
            scope.event(f"judge job {job['kind']} finished in {wall:.1f} s")
        status, result = read_result(scratch, "judge") if status == "ok" else (status, None)
        log_job(job, wall, status, time.monotonic() - judge.worker.started)  # MAXKERNEL_JOB_LOG, as a pool's jobs
        if status == "ok" and not result.get("judge_retiring"):
            self._give_back(judge)
        else:
            self.retire(judge)  # a crash, a hang or garbage: this judge serves no later verdict
        return SandboxResult(status, result, judge.worker.proc.poll(), handle.stderr_tail(), wall,
                             judge.worker.isolation, handle)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._idle.clear()
        self._finalizer()
