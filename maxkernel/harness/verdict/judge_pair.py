"""The candidate's job and the judge's job run side by side, the candidate in a fresh worker of the pool and the
judge on a persistent judge (harness/verdict/judge_service.py) or a fresh worker too, handing over through their scratch
folders (harness/verdict/handoff.py)."""

from __future__ import annotations

import contextvars
import shutil
import threading
from pathlib import Path
from typing import Any

from maxkernel.harness.verdict import handoff
from maxkernel.harness.sandbox.copyout import CopyOutError, open_regular
from maxkernel.harness.sandbox.pool import SandboxResult, WorkerPool

__all__ = ["JudgePair"]


def _copy(src_dir: Path, dst_dir: Path, names: list[str]) -> None:
    for name in names:
        with open_regular(src_dir, name) as src, open(dst_dir / name, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


class JudgePair:
    """The candidate's job and the judge's job, run side by side (the judge's on `judge` when given, else the pool).

    The judge makes the inputs and references while the candidate imports and compiles; the parent then copies the
    inputs across (the candidate never sees a seed), waits for the candidate to finish, and only then lets the
    judge time the baseline (never while the candidate runs) and census the candidate's TPU lowering.
    """

    def __init__(self, pool: WorkerPool, judge=None):
        self.pool = pool
        self.judge = judge  # what runs the judge's job: a persistent judge (JudgeService), else the pool
        self.workers: dict = {}
        self.results: dict[str, Any] = {}
        self.started = {"judge": threading.Event(), "candidate": threading.Event()}
        self.threads: dict[str, threading.Thread] = {}
        self.inputs_made = False  # whether the judge made the inputs (a timeout's reason says when it had not)

    def start(self, name: str, job: dict, files: dict, timeout: float | None) -> None:
        def on_start(worker) -> None:
            self.workers[name] = worker
            self.started[name].set()

        def body() -> None:
            try:
                runner = self.judge if name == "judge" and self.judge is not None else self.pool
                self.results[name] = runner.run(job, files, timeout, on_start=on_start, refill=False)
            except BaseException as exc:  # noqa: BLE001  (re-raised by finish, in the caller's thread)
                self.results[name] = exc
            finally:
                self.started[name].set()

        # The caller's context goes with the thread: its workers belong to the caller's cancel scope.
        self.threads[name] = threading.Thread(target=contextvars.copy_context().run, args=(body,),
                                              name=f"maxkernel-{name}", daemon=True)
        self.threads[name].start()

    def _scratch(self, name: str) -> Path | None:
        worker = self.workers.get(name)
        return worker.scratch if worker is not None else None

    def hand_inputs(self, n: int, *, check: bool = False, timing: int = 0) -> bool:
        """Copy the judge's inputs (n checked sets, the check size's set) into the candidate's scratch as soon as
        they exist, then, once the judge has finished its references, the timing sets, and tell the candidate to
        time. False only when the judge failed (a harness failure); a candidate that is already gone needs nothing."""
        for event in self.started.values():
            event.wait()
        judge, cand = self._scratch("judge"), self._scratch("candidate")
        judge_alive, cand_alive = self.threads["judge"].is_alive, self.threads["candidate"].is_alive

        def wait(name: str) -> bool:
            return judge is not None and handoff.wait_for(
                judge, name, give_up=lambda: not judge_alive() or not cand_alive()) is not None

        if not wait(handoff.INPUTS_MADE):
            return self._stop_candidate(judge_alive)
        self.inputs_made = True
        try:  # into the candidate's scratch, which it may have filled or littered: any failure stops it
            _copy(judge, cand, [f"inputs_{i}.npz" for i in range(n)] + (["check_inputs.npz"] if check else []))
            handoff.post(cand, handoff.INPUTS_READY, {})
        except (CopyOutError, OSError):
            self.abandon("candidate")
            return True
        if not wait(handoff.JUDGE_READY):
            return self._stop_candidate(judge_alive)
        try:
            _copy(judge, cand, [f"timing_inputs_{j}.npz" for j in range(timing)])
            handoff.post(cand, handoff.TIME_GO, {})
        except (CopyOutError, OSError):
            self.abandon("candidate")
        return True

    def _stop_candidate(self, judge_alive) -> bool:
        """The judge failed (False: a harness failure) or the candidate already ended (True)."""
        failed = not judge_alive()
        self.abandon("candidate")
        return not failed

    def release_judge(self, *, time_it: bool, lowered: bytes | None) -> None:
        judge = self._scratch("judge")
        if judge is None or not self.threads["judge"].is_alive():
            return
        try:
            if lowered is not None:
                (judge / "lowered_tpu.mlir").write_bytes(lowered)
            handoff.post(judge, handoff.JUDGE_GO, {"time": time_it, "lowered": "lowered_tpu.mlir" if lowered else None})
        except OSError:
            # Its scratch is gone (a cancel discarded the worker while its thread was still unwinding): the judge
            # is ended, not released, and the caller sees the cancel, not this folder's absence.
            self.abandon("judge")

    def abandon(self, name: str) -> None:
        worker = self.workers.get(name)
        if worker is not None and self.threads[name].is_alive():
            worker.kill()

    def finish(self, name: str) -> SandboxResult:
        self.threads[name].join()
        out = self.results[name]
        if isinstance(out, BaseException):
            raise out
        return out

    def close(self) -> None:
        """Let a judge still waiting go, wait for both jobs, remove their scratch folders, and only then start the
        pool's replacement workers (their start would have competed with the timed runs)."""
        self.release_judge(time_it=False, lowered=None)
        for name, thread in self.threads.items():
            thread.join()
            out = self.results.get(name)
            if isinstance(out, SandboxResult):
                out.cleanup()
        self.pool.refill()
