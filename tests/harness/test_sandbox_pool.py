"""The worker pool: a pre-started worker that died while waiting is replaced, never reported as the job's crash."""

from pathlib import Path

import pytest

from maxkernel.harness.sandbox.pool import WorkerPool

pytestmark = pytest.mark.integration

JOB = {"kind": "reference", "task": "12p_RMSNorm", "size": "smoke", "seeds": [0]}


def test_a_worker_that_died_while_waiting_is_replaced(monkeypatch):
    with WorkerPool(size=1) as pool:
        waiting = pool._ready[0]
        waiting.kill()  # dead before its job, as when the thread that started it exits
        assert pool.acquire() is not waiting  # acquire skips a worker already known dead
        dead = pool.acquire()
        dead.kill()
        monkeypatch.setattr(pool, "acquire", lambda refill=True: dead)  # dead after acquire's check
        out = pool.run(JOB, timeout=120)
        assert out.worker is not dead
        assert out.status == "ok" and out.result["status"] == "ok", out.stderr_tail


def test_the_job_log_has_a_line_per_job_with_its_kind_task_and_wall(tmp_path, monkeypatch):
    """MAXKERNEL_JOB_LOG: where a run's time goes, one JSON line per sandboxed job; a log that cannot be written
    costs the job nothing."""
    import json

    from maxkernel.settings import get_settings

    log = tmp_path / "jobs.jsonl"
    monkeypatch.setenv("MAXKERNEL_JOB_LOG", str(log))
    get_settings.cache_clear()
    try:
        with WorkerPool(size=0) as pool:
            out = pool.run(JOB, timeout=120)
            assert out.status == "ok", out.stderr_tail
            monkeypatch.setenv("MAXKERNEL_JOB_LOG", str(tmp_path / "no" / "such" / "folder" / "jobs.jsonl"))
            get_settings.cache_clear()
            assert pool.run(JOB, timeout=120).status == "ok"
    finally:
        get_settings.cache_clear()
    (line,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert (line["kind"], line["task"], line["size"], line["status"]) == ("reference", "12p_RMSNorm", "smoke", "ok")
    assert 0 < line["wall_s"] <= out.wall_s + 0.01 and line["worker_age_s"] >= line["wall_s"]


@pytest.mark.integration
def test_a_pool_killed_unclosed_leaves_nothing_the_next_pool_keeps(tmp_path):
    """A process holding a pool dies by SIGKILL (no finalizer runs): its root, its pre-started worker's scratch
    (a tmpfs mount where this runs as root) stay behind. The next pool, in another process, sweeps them; a root
    whose owner lives and a root without an owner are left alone."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from maxkernel.harness.sandbox import stale

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    code = ("import sys, time\nfrom maxkernel.harness.sandbox.pool import WorkerPool\np = WorkerPool(size=1)\n"
            "print(p.root, flush=True)\ntime.sleep(600)\n")
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        root = Path(child.stdout.readline().strip())
        assert root.is_dir() and (root / stale.OWNER).is_file()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    time.sleep(0.5)
    left = stale._mounts_under(root)
    assert root.is_dir()  # left behind: nothing ran at the kill
    live = tmp_path / f"{stale.PREFIX}live"
    live.mkdir()
    stale.claim(live)
    unowned = tmp_path / f"{stale.PREFIX}unowned"
    unowned.mkdir()
    assert stale.sweep(tmp_path) == [root]
    assert not root.exists() and live.is_dir() and unowned.is_dir()
    assert not any(p.startswith(str(root)) for p in stale._mounts_under(tmp_path)), left


@pytest.mark.integration
def test_a_pool_closed_while_a_worker_is_out_leaves_no_mount_and_no_root(tmp_path):
    """Found as dozens of leaked scratch tmpfs mounts on a test machine, in roots without their owner file (so no
    sweep would take them): a process exits while a worker it took from its pool is still held (a job running in
    another thread). The pool's close at exit must unmount that worker's scratch too, then remove the root."""
    import os
    import subprocess
    import sys

    from maxkernel.harness.sandbox import stale
    from maxkernel.harness.sandbox.pool import _MOUNT_WORKS, _mount_scratch

    probe = tmp_path / "probe"
    probe.mkdir()
    if not _mount_scratch(probe, 8):
        pytest.skip("this process may not mount a tmpfs (not root): no scratch mount to leak")
    subprocess.run(["umount", "-l", str(probe)], check=True)
    _MOUNT_WORKS.clear()
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    code = ("from maxkernel.harness.sandbox.pool import WorkerPool\np = WorkerPool(size=1)\nheld = p.acquire()\n"
            "print(p.root, held.scratch, held.scratch_mb, flush=True)\n")  # exits holding `held`
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    root, scratch, scratch_mb = out.stdout.split()
    assert scratch.startswith(root + "/") and scratch_mb != "None", out.stdout  # it was a tmpfs of its own
    assert not [p for p in stale._mounts_under(tmp_path) if p.startswith(root + "/")]
    assert not Path(root).exists()


def test_a_settings_sized_pool_keeps_one_more_ahead_only_when_jobs_come_back_to_back(monkeypatch):
    """One worker ahead by default; a job that takes a worker still importing (back to back) grows the pool to two.
    The pool's first job (a one-shot CLI call takes it at once), and a worker taken after it had time to import, do
    not; a pool given its size never grows."""
    import maxkernel.harness.sandbox.pool as sandbox
    from maxkernel.settings import get_settings

    monkeypatch.setenv("MAXKERNEL_POOL_SIZE", "1")
    get_settings.cache_clear()
    try:
        with WorkerPool() as pool:
            assert pool.size == 1 and len(pool._ready) == 1
            monkeypatch.setattr(sandbox, "WARM_S", 3600.0)
            pool.acquire().discard()  # the pool's first job takes the worker started with it: a first use
            assert pool.size == 1 and len(pool._ready) == 1
            monkeypatch.setattr(sandbox, "WARM_S", 0.0)  # every worker counts as imported: think time between jobs
            pool.acquire().discard()
            assert pool.size == 1 and len(pool._ready) == 1
            monkeypatch.setattr(sandbox, "WARM_S", 3600.0)  # every worker counts as still importing: back to back
            pool.acquire().discard()
            assert pool.size == 2 and len(pool._ready) == 2
            pool.acquire().discard()
            assert pool.size == 2 and len(pool._ready) == 2  # bounded
        with WorkerPool(size=1) as fixed:
            fixed.acquire().discard()
            assert fixed.size == 1 and len(fixed._ready) == 1
    finally:
        get_settings.cache_clear()


def test_a_libtpu_dump_flag_in_the_callers_environment_does_not_reach_the_jobs(monkeypatch, tmp_path):
    """An LLO profile dump inherited by every sandboxed compile (a user's LIBTPU_INIT_ARGS, or one a test left
    behind) made the shipped 8p_GEMM's full-size compile run out of its address space, twice in a row: the dump
    flags are dropped from what a job inherits, the other libtpu flags kept. The compile itself proves it."""
    from maxkernel.harness.sandbox.pool import _child_env
    from maxkernel.tools.compile_pallas import compile_many

    monkeypatch.setenv("LIBTPU_INIT_ARGS", f"--xla_jf_dump_static_llo_profile_to={tmp_path} --xla_tpu_foo=1")
    assert _child_env(tmp_path)["LIBTPU_INIT_ARGS"] == "--xla_tpu_foo=1"
    monkeypatch.setenv("LIBTPU_INIT_ARGS", f"--xla_jf_dump_static_llo_profile_to={tmp_path}")
    [r] = compile_many("8p_GEMM", str(Path(__file__).parents[2] / "jaxbench/8p_GEMM/kernel.py"), ["v5e"])
    assert r.ok, r.summary
