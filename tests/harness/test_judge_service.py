"""The persistent judge (harness/verdict/judge_service.py): one long-lived judge serves verdicts back to back; a judge that
crashes or hangs mid-verdict costs that verdict only (an `error` verdict, never a wrong one), and the next verdict
is judged right by a fresh judge. Candidate workers stay one per verdict."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

import jaxbench
from maxkernel.harness.jobs import reference_job
from maxkernel.harness.verdict.checksize import CHECK_SIZE, draw
from maxkernel.harness.verdict.evaluate import Evaluator
from maxkernel.harness.sandbox.pool import WorkerPool
from maxkernel.tasks import load_task

TASK = "12p_RMSNorm"
KERNEL = jaxbench.task_dir(TASK) / "kernel.py"


@pytest.fixture(scope="module")
def ev():
    with Evaluator(WorkerPool(size=1)) as ev:
        yield ev


def _tree(pid: int) -> list[int]:
    """`pid` and every process below it (bubblewrap puts the judge's Python in a session of its own)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, frontier = [pid], [pid]
    while frontier:
        frontier = [p for p, pp in parents.items() if pp in frontier]
        out += frontier
    return out


def _when_the_next_job_starts(ev: Evaluator, signum: int, at: str = "", frozen: bool = False) -> threading.Thread:
    """Send `signum` to the idle judge's processes as soon as its next job's folder (or file `at` in it) appears.
    `frozen`: stop them (SIGSTOP) now, so the job has not begun when the signal lands, however late this thread
    gets to run on a loaded machine (the parent makes the job's folder; a stopped judge cannot start it)."""
    [judge] = ev.judges._idle
    folder, pid = judge.worker.scratch / f"job-{judge.jobs}", judge.worker.proc.pid
    if frozen:
        for p in _tree(pid):
            os.kill(p, signal.SIGSTOP)

    def watch():
        deadline = time.monotonic() + 120
        while not (folder / at).exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        for p in _tree(pid):
            os.kill(p, signum)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


@pytest.mark.unit
def test_a_check_size_leaves_the_task_as_shipped(tmp_path):
    """A persistent judge keeps task modules imported: the check size a job injects is taken out afterwards."""
    task = load_task(TASK)
    check = {**draw(task, "smoke"), "seed": 5}
    sizes = dict(task.module.SIZES)
    out = reference_job.run({"task": TASK, "size": "smoke", "seeds": [0], "reps": 0, "check": check}, tmp_path)
    assert out["status"] == "ok" and out["meta"]["check"]["size"] == CHECK_SIZE
    assert (tmp_path / "check_ref.npz").is_file()
    assert task.module.SIZES == sizes and CHECK_SIZE not in task.module.SIZES


@pytest.mark.integration
@pytest.mark.slow
def test_one_judge_serves_verdicts_back_to_back(ev, tmp_path, monkeypatch):
    import json

    from maxkernel.settings import get_settings

    log = tmp_path / "jobs.jsonl"  # MAXKERNEL_JOB_LOG: the judge's jobs are logged beside the candidates'
    monkeypatch.setenv("MAXKERNEL_JOB_LOG", str(log))
    get_settings.cache_clear()
    try:
        _back_to_back(ev, tmp_path)
    finally:
        monkeypatch.delenv("MAXKERNEL_JOB_LOG")
        get_settings.cache_clear()
    judged = [ln for ln in map(json.loads, log.read_text().splitlines()) if ln["kind"] == "reference"]
    assert [(ln["task"], ln["status"]) for ln in judged] == [(TASK, "ok")] * 3
    assert judged[2]["worker_age_s"] > judged[0]["worker_age_s"] >= judged[0]["wall_s"] > 0  # one judge, ageing


def _back_to_back(ev, tmp_path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(KERNEL.read_text().replace("normed * scale_ref[...]", "normed * (scale_ref[...] + 0.25)"))
    assert wrong.read_text() != KERNEL.read_text()
    first = ev.evaluate(TASK, KERNEL, reps=2)
    second = ev.evaluate(TASK, wrong, reps=0)
    third = ev.evaluate(TASK, KERNEL, reps=0)
    assert first.status == "correct" and first.baseline and first.baseline.samples_ms, first.reason
    assert second.status == "incorrect", second.reason
    assert third.status == "correct", third.reason
    # Fresh seeds each time, from one judge that served all three.
    assert len({tuple(v.correctness.seeds) for v in (first, second, third)}) == 3
    assert ev.judges.started == 1 and ev.judges._idle[0].jobs == 3


@pytest.mark.integration
@pytest.mark.slow
def test_a_judge_killed_mid_verdict_costs_that_verdict_only(ev):
    ev.evaluate(TASK, KERNEL, reps=0)  # a judge is up and idle
    started = ev.judges.started
    killer = _when_the_next_job_starts(ev, signal.SIGKILL, frozen=True)  # killed before it made the inputs
    hit = ev.evaluate(TASK, KERNEL, reps=0)
    killer.join()
    assert hit.status == "error" and hit.stage == "judge", (hit.status, hit.stage, hit.reason)
    after = ev.evaluate(TASK, KERNEL, reps=0)
    assert after.status == "correct", after.reason
    assert ev.judges.started == started + 1


@pytest.mark.integration
@pytest.mark.slow
def test_a_judge_that_hangs_mid_verdict_costs_that_verdict_only(ev, monkeypatch):
    """Stopped once it has made the inputs (alive, holding its pipe, answering nothing): the candidate runs, the
    judge never brings its references, and the verdict ends at the judge's bound with an error."""
    from maxkernel.harness.verdict import evaluate

    monkeypatch.setattr(evaluate, "JUDGE_MARGIN_S", 5.0)  # the judge's bound: the candidate's 60 s and 5 more
    ev.evaluate(TASK, KERNEL, reps=0)
    started = ev.judges.started
    stopper = _when_the_next_job_starts(ev, signal.SIGSTOP, at="inputs.made.json")
    t0 = time.monotonic()
    hit = ev.evaluate(TASK, KERNEL, reps=0, timeout=60)  # room for a loaded machine
    stopper.join()
    assert hit.status == "error" and hit.stage == "judge", (hit.status, hit.stage, hit.reason)
    assert "(timeout)" in hit.reason and 60 <= time.monotonic() - t0 < 200
    after = ev.evaluate(TASK, KERNEL, reps=0)
    assert after.status == "correct", after.reason
    assert ev.judges.started == started + 1


@pytest.mark.unit
def test_what_a_failed_judge_makes_of_the_verdict():
    """Died reading the candidate's lowering: the lowering is the candidate's, refused. Any other failure: no verdict
    on the kernel (error), never correct or incorrect."""
    from maxkernel.harness.verdict.evaluate import _judge_failed
    from maxkernel.harness.sandbox.pool import SandboxResult

    base = {"task": TASK, "kernel_file": "kernel.py", "size": "smoke", "isolation": "bwrap"}
    crashed = SandboxResult("crashed", None, -9, "Segmentation fault", 3.0, "bwrap")
    hung = SandboxResult("timeout", None, -9, "", 300.0, "bwrap")
    refused = _judge_failed(crashed, base, "12p (smoke)", read_lowering=True)
    assert refused.status == "rejected" and refused.stage == "census" and "Segmentation" in refused.detail
    for res, lowering in ((crashed, False), (hung, True), (hung, False)):
        v = _judge_failed(res, base, "12p (smoke)", read_lowering=lowering)
        assert v.status == "error" and v.stage == "judge" and res.status in v.reason


@pytest.mark.integration
@pytest.mark.slow
def test_a_job_that_cannot_start_costs_its_judge_not_the_next_verdict(ev, monkeypatch):
    """A file that will not copy into the job's folder: the call fails, the judge it took is retired (not left
    busy, never idle again), and the next verdict is judged by a fresh judge."""
    from maxkernel.harness.verdict import judge_service

    ev.evaluate(TASK, KERNEL, reps=0)
    started = ev.judges.started
    [judge] = ev.judges._idle

    def no_room(scratch, files):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(judge_service, "copy_files", no_room)
    with pytest.raises(OSError):
        ev.judges.run({"kind": "reference", "task": TASK, "size": "smoke", "seeds": [0], "reps": 0}, timeout=60)
    monkeypatch.undo()
    assert judge.retired and not judge.alive() and ev.judges._idle == [] and judge not in ev.judges._all
    assert ev.evaluate(TASK, KERNEL, reps=0).status == "correct"
    assert ev.judges.started == started + 1
