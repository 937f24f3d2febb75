"""harness/sandbox/cancel.py: a cancelled scope kills its workers, refuses new starts, and follows the call into threads."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import time

import pytest

from maxkernel.harness.sandbox import cancel
from maxkernel.harness.sandbox.cancel import CancelScope, Cancelled, cancel_scope


class FakeWorker:
    """Stands in for a sandboxed worker in the unit tier: only what a scope touches (kill, cancel_scope)."""

    def __init__(self):
        self.killed = 0
        self.cancel_scope = None

    def kill(self):
        self.killed += 1


@pytest.mark.unit
def test_cancel_kills_adopted_workers_and_refuses_more():
    scope = CancelScope()
    a, b = FakeWorker(), FakeWorker()
    scope.adopt(a)
    scope.adopt(b)
    scope.release(b)  # finished: no longer the scope's
    assert scope.cancel() == 1
    assert (a.killed, b.killed) == (1, 0)
    late = FakeWorker()
    with pytest.raises(Cancelled):
        scope.adopt(late)  # started while the cancel ran: killed at once
    assert late.killed == 1
    with pytest.raises(Cancelled):
        scope.check()


@pytest.mark.unit
def test_a_worker_belongs_to_one_scope():
    first, second = CancelScope(), CancelScope()
    w = FakeWorker()
    first.adopt(w)
    second.adopt(w)  # a pre-started worker taken by another call
    assert first.cancel() == 0 and w.killed == 0
    assert second.cancel() == 1 and w.killed == 1


@pytest.mark.unit
def test_cancelled_is_not_an_ordinary_exception():
    """The harness turns `Exception`s into verdicts; a cancel must unwind past those handlers."""
    assert not issubclass(Cancelled, Exception)


@pytest.mark.unit
def test_scope_follows_the_call_into_threads():
    seen = {}

    def where(name):
        seen[name] = cancel.current()

    async def call(scope):
        with cancel_scope(scope):
            await asyncio.to_thread(where, "to_thread")
            t = threading.Thread(target=contextvars.copy_context().run, args=(where, "thread"))
            t.start()
            t.join()
        where("after")

    scope = CancelScope()
    asyncio.run(call(scope))
    assert seen == {"to_thread": scope, "thread": scope, "after": None}


@pytest.mark.unit
def test_events_reach_the_listener_and_a_failing_listener_is_ignored():
    heard = []
    CancelScope(on_event=heard.append).event("sandboxed job reference started")
    CancelScope(on_event=lambda _t: 1 / 0).event("x")
    assert heard == ["sandboxed job reference started"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.integration
def test_cancel_kills_real_pooled_workers_and_the_pool_starts_no_more():
    """Workers pre-started by a pool inside the scope die on cancel; the pool then refuses to start one."""
    from maxkernel.harness.sandbox.pool import WorkerPool

    with cancel_scope() as scope:
        pool = WorkerPool(size=2)
        try:
            pids = [w.proc.pid for w in pool._ready]
            assert len(pids) == 2 and all(_alive(p) for p in pids)
            assert scope.cancel() == 2
            deadline = time.monotonic() + 5
            while any(_alive(p) for p in pids) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not any(_alive(p) for p in pids)
            with pytest.raises(Cancelled):
                pool.run({"kind": "reference"}, {})
        finally:
            pool.close()
    assert not pool.root.exists()


@pytest.mark.unit
def test_a_judge_whose_scratch_a_cancel_removed_is_abandoned_not_raised(tmp_path):
    """The race CI met: a cancel discards the judge's worker (its scratch removed) while the judge's thread is still
    unwinding; the evaluation's cleanup then releases the judge. That must end the judge, not raise
    FileNotFoundError over the Cancelled the caller is owed."""
    from maxkernel.harness.verdict import handoff
    from maxkernel.harness.verdict.judge_pair import JudgePair

    gone = tmp_path / "w-judge"
    worker = FakeWorker()
    worker.scratch = gone  # never created: the cancel's discard already removed it
    stop = threading.Event()
    pair = JudgePair(pool=None)
    pair.workers["judge"] = worker
    pair.threads["judge"] = threading.Thread(target=stop.wait, daemon=True)
    pair.threads["judge"].start()
    try:
        pair.release_judge(time_it=True, lowered=b"module {}")
        assert worker.killed == 1
    finally:
        stop.set()
    # and a hand-off file that vanishes between its check and its read asks give_up again instead of raising
    gone.mkdir()
    (gone / handoff.JUDGE_READY).mkdir()  # is_file() is False: waits; then the folder goes with the worker
    calls = []
    assert handoff.wait_for(gone, handoff.JUDGE_READY, poll_s=0.001, give_up=lambda: calls.append(1) or len(calls) > 2) is None


@pytest.mark.integration
@pytest.mark.slow
def test_a_cancelled_evaluation_unwinds_and_leaves_nothing(tmp_path, monkeypatch):
    """An evaluation of a kernel that never finishes, cancelled once its candidate job runs: the evaluating thread
    ends with Cancelled, its workers are dead and its pool's folder is gone."""
    import tempfile
    from pathlib import Path

    from maxkernel.harness.verdict.evaluate import evaluate

    hang = Path(__file__).parent / "kernels" / "hostile" / "hang_kernel.py"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the pool's folder goes here
    running = threading.Event()
    scope = CancelScope(on_event=lambda text: running.set() if "candidate started" in text else None)
    out: dict = {}

    def run():
        with cancel_scope(scope):
            try:
                out["verdict"] = evaluate("12p_RMSNorm", hang, size="smoke", seeds=[0])
            except BaseException as exc:  # noqa: BLE001
                out["raised"] = exc

    t = threading.Thread(target=run)
    t.start()
    assert running.wait(120), "the candidate's job never started"
    time.sleep(0.5)
    workers = [w for w in scope._workers.values()]
    assert scope.cancel() >= 1
    t.join(30)
    assert not t.is_alive() and isinstance(out.get("raised"), Cancelled), out
    assert not any(_alive(w.proc.pid) for w in workers)
    assert os.listdir(tmp_path) == []
