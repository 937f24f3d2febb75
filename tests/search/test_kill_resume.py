"""A search process killed with SIGKILL mid-run resumes from its folder: every finished node intact, no
finished node produced again, and the search completes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _done(db) -> dict:
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, finished, source_sha, verdict FROM nodes WHERE status = 'done'").fetchall()
    except sqlite3.OperationalError:  # the search is still creating its schema
        rows = []
    finally:
        con.close()
    return {r[0]: r[1:] for r in rows}


def _running(db) -> list[int]:
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute("SELECT id FROM nodes WHERE status = 'running'")]
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def test_kill_9_then_resume_loses_and_redoes_nothing(tmp_path):
    out = tmp_path / "search"
    env = {**os.environ, "MAXKERNEL_MODEL": "replay", "MAXKERNEL_DATA_DIR": str(tmp_path / "data")}
    cmd = [sys.executable, "-m", "maxkernel.cli", "search", "--task", "12p_RMSNorm", "--algorithm", "beam",
           "--width", "1", "--branches", "2", "--depth", "2", "--max-nodes", "4", "--workers", "1", "--no-profile",
           "--out", str(out), "--json"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = out / "graph.sqlite"
    deadline = time.monotonic() + 400
    # Killed once a node has finished and the next one is mid-way, so the kill leaves both kinds of node behind.
    # The search is stopped (SIGSTOP) before the second look: a node can finish between a look and the kill (one
    # whose kernel was judged before comes back from the verdict cache in milliseconds), and a stopped search
    # writes nothing, so what the second look sees is what the kill leaves.
    while time.monotonic() < deadline and proc.poll() is None:
        if db.is_file() and _done(db) and _running(db):
            os.kill(proc.pid, signal.SIGSTOP)
            if _done(db) and _running(db):
                break
            os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.1)
    assert proc.poll() is None, "the search ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _done(db)
    in_flight = _running(db)
    assert before and in_flight, f"the kill needs a node done and one in flight (done {before}, running {in_flight})"

    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    result = json.loads(again.stdout)
    after = _done(db)
    assert {k: after[k] for k in before} == before  # same finish time and kernel: not redone
    assert len(after) == 4 and result["status"] == "correct" and result["nodes"] == 4
    # The node killed mid-way was put back to pending and built again.
    assert f"resuming: nodes {in_flight}" in again.stderr and set(in_flight) <= set(after)
