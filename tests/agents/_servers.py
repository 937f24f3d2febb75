"""Start a real `adk api_server` / `adk web` over maxkernel/apps on a free loopback port, and stop it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

AGENTS = Path(__file__).resolve().parents[2] / "maxkernel" / "apps"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class AdkServer:
    proc: subprocess.Popen
    url: str
    data_dir: Path
    log: Path
    drafts_dir: Path  # where a person's drafts are read from (MAXKERNEL_DRAFTS_DIR), beside data_dir

    def get(self, path: str, timeout: float = 30):
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return json.loads(r.read())

    def post(self, path: str, body: dict, timeout: float = 300):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def _descendants(pid: int) -> list[int]:
    """Every live process under `pid` (sandbox workers run in sessions of their own, out of the group)."""
    parents = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        todo += kids
    return found


def _stop(proc: subprocess.Popen) -> None:
    kids = _descendants(proc.pid)
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    for k in kids:
        try:
            os.kill(k, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def adk_server(command: str, data_dir: Path, *, startup_s: float = 90, args: tuple[str, ...] = (),
               env: dict[str, str] | None = None):
    """`adk <command> maxkernel/apps` with the replay model, sessions in a SQLite file and artifacts,
    workspaces and the log under `data_dir`, `env` on top; yields an AdkServer once /list-apps answers."""
    data_dir.mkdir(parents=True, exist_ok=True)
    drafts = data_dir.with_name(data_dir.name + "-drafts")
    drafts.mkdir(exist_ok=True)
    port = free_port()
    # A developer's own model, store or per-role choices must not leak into the test's server.
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("MAXKERNEL_SESSION_URI", "MAXKERNEL_ARTIFACT_URI", "MAXKERNEL_ROLE_MODELS")}
    full_env.update({"MAXKERNEL_MODEL": "replay", "MAXKERNEL_DATA_DIR": str(data_dir), "JAX_PLATFORMS": "cpu",
                     "PYTHONUNBUFFERED": "1", "MAXKERNEL_DRAFTS_DIR": str(drafts), **(env or {})})
    cmd = [sys.executable, "-m", "google.adk.cli", command, "--host", "127.0.0.1", "--port", str(port),
           "--session_service_uri", f"sqlite:///{data_dir / 'sessions.db'}",
           "--artifact_service_uri", f"file://{data_dir / 'artifacts'}", *args, str(AGENTS)]
    log = data_dir / f"adk_{command}.log"
    with open(log, "wb") as out:
        # cwd in data_dir: no developer .env is read, nothing is written into the repository.
        proc = subprocess.Popen(cmd, cwd=data_dir, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    server = AdkServer(proc, f"http://127.0.0.1:{port}", data_dir, log, drafts)
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"adk {command} exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                server.get("/list-apps", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"adk {command} did not answer in {startup_s:.0f} s:\n{server.log_tail()}")
                time.sleep(0.5)
        yield server
    finally:
        _stop(proc)
