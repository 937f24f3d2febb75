"""Agent state outside the process: SQLite sessions survive a restart, artifacts land in GCS (emulated)."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from _extras import need_module
from _optimize_helpers import agent_env, mk

BUCKET = "maxkernel-test"

# Loads the session in a fresh interpreter: nothing of the run that wrote it is left in memory.
_READ_SESSION = """
import asyncio, json, sys
from google.adk.sessions.sqlite_session_service import SqliteSessionService
async def main():
    service = SqliteSessionService(sys.argv[1])
    s = await service.get_session(app_name="auto", user_id="user", session_id=sys.argv[2])
    calls = [p.function_call.name for e in s.events for p in (e.content.parts if e.content else None) or []
             if p.function_call]
    print(json.dumps({"result": s.state.get("result"), "usage": s.state.get("usage"), "calls": calls,
                      "authors": sorted({e.author for e in s.events})}))
asyncio.run(main())
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gcs():
    """A GCS emulator on a free loopback port with one bucket; yields (emulator URL, client)."""
    need_module("gcp_storage_emulator", extra="dev")
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                             "--port", str(port), "--in-memory", "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"GCS emulator did not start: {proc.stderr.read().decode()[-2000:]}")
                time.sleep(0.2)
        client = storage.Client(project="test", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": url})
        client.create_bucket(BUCKET)
        yield url, client
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory, gcs):
    """One replay optimize run with sessions in a SQLite file and artifacts in the emulated bucket."""
    base = tmp_path_factory.mktemp("stores")
    db = base / "sessions.db"
    env = {**agent_env(base / "data"), "STORAGE_EMULATOR_HOST": gcs[0]}
    args = ("optimize", "--task", "12p_RMSNorm", "--model", "replay", "--session-uri", f"sqlite:///{db}",
            "--artifact-uri", f"gs://{BUCKET}", "--json")
    r = mk(*args, env=env, cwd=base)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), db, args, env, base


@pytest.mark.integration
@pytest.mark.slow
def test_sqlite_session_survives_a_process_restart(stored_run):
    doc, db, *_ = stored_run
    r = subprocess.run([sys.executable, "-c", _READ_SESSION, str(db), doc["session_id"]], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout)
    assert s["result"]["status"] == doc["status"] == "correct"
    assert s["result"]["kernel"] == doc["kernel"] and s["result"]["verdict"] == doc["verdict"]
    assert s["usage"]["llm_calls"] == doc["llm_calls"] > 0
    assert {"maxkernel_auto", "planner", "implementer", "debugger"} <= set(s["authors"])
    assert "write_file" in s["calls"] and "profile_kernel" in s["calls"]


@pytest.mark.integration
@pytest.mark.slow
def test_resuming_a_finished_session_by_id_answers_its_result(stored_run):
    doc, _, args, env, base = stored_run
    r = mk(*args, "--session-id", doc["session_id"], env=env, cwd=base)
    assert r.returncode == 0, r.stderr[-3000:]
    again = json.loads(r.stdout)
    assert "(resumed)" in r.stderr and "already finished" in r.stderr
    assert again["session_id"] == doc["session_id"] and again["status"] == doc["status"]
    assert again["verdict"] == doc["verdict"] and again["llm_calls"] == doc["llm_calls"]  # no new model calls


@pytest.mark.integration
@pytest.mark.slow
def test_artifacts_land_in_the_gcs_bucket(stored_run, gcs):
    doc, *_ = stored_run
    client = gcs[1]
    prefix = f"auto/user/{doc['session_id']}/"
    names = {b.name[len(prefix):] for b in client.list_blobs(BUCKET, prefix=prefix)}
    # kernel.py: the implementer's version and the debugger's fix; best_kernel.py: the judged answer.
    assert {"kernel.py/0", "kernel.py/1", "best_kernel.py/0"} <= names, names
    # Each new best is a version (the judged fix, then its tuned file when that was judged better): the newest
    # is the answer.
    newest = max(int(n.split("/")[1]) for n in names if n.startswith("best_kernel.py/"))
    best = client.bucket(BUCKET).blob(prefix + f"best_kernel.py/{newest}").download_as_text()
    with open(doc["kernel"]) as f:
        assert best == f.read()
