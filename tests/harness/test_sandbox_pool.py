"""The worker pool: a pre-started worker that died while waiting is replaced, never reported as the job's crash."""

import pytest

from maxkernel.harness.sandbox import WorkerPool

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
