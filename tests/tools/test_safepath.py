"""Files under a root opened by descriptor, never by name after a check: no link is followed anywhere on the way,
not in the workspace tools, not when a profile's trace is written out (the default ./profiles or a --out folder)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from google.adk import Runner
from google.adk.agents.invocation_context import InvocationContext
from google.adk.apps import App
from google.adk.sessions import InMemorySessionService
from google.adk.tools import ToolContext

from maxkernel.agents.replay import ReplayLlm
from maxkernel.agents.sub_agents import ROLES
from maxkernel.tools import xprof_capture as xc
from maxkernel.tools.workspace import list_files, read_file, write_file

pytestmark = pytest.mark.unit

SECRET = "the outside secret"


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    return root


@pytest.fixture
async def ctx(ws):
    """A real ADK ToolContext over a session whose workspace is `ws` (no artifact store: writes stay on disk)."""
    app = App(name="ws", root_agent=ROLES["implementer"](ReplayLlm(role="implementer")))
    runner = Runner(app=app, session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="ws", user_id="u", state={"workspace": str(ws)})
    ic = InvocationContext(session_service=runner.session_service, artifact_service=None, invocation_id="e-test",
                           agent=runner.agent, session=session)
    return ToolContext(ic)


def _outside(ws: Path) -> Path:
    return ws.parent / "outside"


# -- links, static ------------------------------------------------------------------------------------------------
async def test_a_linked_file_is_neither_read_nor_written_through(ws, ctx):
    secret = _outside(ws) / "secret.txt"
    (ws / "key.txt").symlink_to(secret)  # absolute link to a file outside
    (ws / "alias.txt").symlink_to(ws / "real.txt")  # even a link that stays inside is not followed
    (ws / "real.txt").write_text("inside")
    (ws / "new.py").symlink_to(_outside(ws) / "planted.py")  # dangling: a write would create it outside
    for rel in ("key.txt", "alias.txt", "new.py"):
        reply = read_file(rel, ctx)
        assert "error" in reply and "symbolic link" in reply["error"], reply
        reply = await write_file(rel, "overwritten", ctx)
        assert "error" in reply and "symbolic link" in reply["error"], reply
    assert secret.read_text() == SECRET
    assert sorted(p.name for p in _outside(ws).iterdir()) == ["secret.txt"]
    assert (ws / "real.txt").read_text() == "inside"
    assert read_file("real.txt", ctx) == {"path": "real.txt", "content": "inside"}


async def test_a_linked_parent_folder_is_neither_read_nor_written_through(ws, ctx):
    (ws / "door").symlink_to(_outside(ws))  # absolute link to a folder outside, with a secret in it
    (ws / "sub").mkdir()
    (ws / "sub" / "door").symlink_to(_outside(ws))
    for rel in ("door/secret.txt", "door/new.txt", "sub/door/secret.txt", "sub/door/deeper/new.txt"):
        reply = read_file(rel, ctx)
        assert "error" in reply and "refused" in reply["error"] and "symbolic link" in reply["error"], reply
        reply = await write_file(rel, "overwritten", ctx)
        assert "error" in reply and "refused" in reply["error"], reply
    assert (_outside(ws) / "secret.txt").read_text() == SECRET
    assert sorted(p.name for p in _outside(ws).iterdir()) == ["secret.txt"]
    # New parent folders are still made, inside.
    assert (await write_file("sub/a/b/c.py", "c\n", ctx))["bytes"] == 2
    assert read_file("sub/a/b/c.py", ctx)["content"] == "c\n"


async def test_non_regular_files_and_path_shapes_are_refused(ws, ctx):
    os.mkfifo(ws / "pipe")
    assert "not a regular file" in read_file("pipe", ctx)["error"]  # and no hang waiting for a writer
    assert "error" in (await write_file("pipe", "x", ctx))
    for rel in ("", "..", "../outside/secret.txt", "/etc/hostname", "a\0b", "sub/../x.py"):
        assert "refused" in read_file(rel, ctx)["error"]
        assert "refused" in (await write_file(rel, "x", ctx))["error"]
    assert "no file" in read_file("missing.py", ctx)["error"]
    os.link(_outside(ws) / "secret.txt", ws / "hard.txt")  # a hard link to an outside file: never written into
    assert "error" in (await write_file("hard.txt", "overwritten", ctx))
    assert (_outside(ws) / "secret.txt").read_text() == SECRET


async def test_list_files_does_not_enter_linked_folders(ws, ctx):
    (ws / "door").symlink_to(_outside(ws))
    (ws / "key.txt").symlink_to(_outside(ws) / "secret.txt")
    (ws / "notes").mkdir()
    (ws / "notes" / "plan.md").write_text("p")
    (ws / "notes" / "back").symlink_to(ws / "notes")  # a loop, too
    (ws / "kernel.py").write_text("k")
    os.mkfifo(ws / "pipe")
    assert list_files(ctx) == {"files": ["kernel.py", "notes/plan.md"]}


def test_safepath_functions_directly(ws):
    from maxkernel.tools import safepath
    from maxkernel.tools.workspace import WorkspaceError

    assert issubclass(safepath.SafePathError, WorkspaceError) and WorkspaceError is safepath.WorkspaceError
    assert safepath.write_text(ws, "a/b/c.txt", "héllo") == 6
    assert safepath.read_bytes(ws, "a/b/c.txt", 6) == "héllo".encode()
    with pytest.raises(safepath.SafePathError, match="limit"):
        safepath.read_bytes(ws, "a/b/c.txt", 5)
    assert safepath.read_text(ws, "a/b/c.txt", 2) == "hé"
    assert safepath.read_text(ws, "a//./b/c.txt", 100) == "héllo"
    (ws / "a" / "door").symlink_to(_outside(ws))
    with pytest.raises(safepath.SafePathError, match="'a/door' is a symbolic link"):
        with safepath.make_dirs(ws, "a/door/new"):
            pass
    with safepath.make_dirs(ws, "x/y") as fd:  # a folder fd others write from
        assert safepath.write_text(fd, "z.txt", "z") == 1
        with safepath.make_dirs(fd, "w"):
            pass
        with pytest.raises(FileExistsError):
            with safepath.make_dirs(fd, "w", exist_ok=False):
                pass
    with safepath.open_dir(ws, "x") as fd:
        assert safepath.list_files(fd) == ["y/z.txt"]
    assert safepath.list_files(ws) == ["a/b/c.txt", "x/y/z.txt"]
    (ws / "root_link").symlink_to(ws)
    with pytest.raises(safepath.SafePathError, match="root folder"):
        safepath.list_files(ws / "root_link")
    assert sorted(p.name for p in _outside(ws).iterdir()) == ["secret.txt"]


# -- races: the swap between a check and an open --------------------------------------------------------------------
class _Swapper:
    """Swaps `target` between a regular file and a link to `secret`, as fast as it can, until stopped."""

    def __init__(self, target: Path, secret: Path):
        self.target, self.secret = target, secret
        self.stop = threading.Event()
        self.swaps = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        link, plain = self.target.with_name(".swap-link"), self.target.with_name(".swap-file")
        while not self.stop.is_set():
            os.symlink(self.secret, link)
            os.replace(link, self.target)
            plain.write_text("inside")
            os.replace(plain, self.target)
            self.swaps += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)


def _race(swapper: _Swapper, calls: int = 10_000, limit_s: float = 20.0):
    """Calls for the race: at least `calls` of them, and until the swapper has swapped more than 100 times (on a
    loaded machine the calls can outrun its thread), within `limit_s`."""
    deadline = time.monotonic() + limit_s
    n = 0
    while (n < calls or swapper.swaps <= 100) and time.monotonic() < deadline:
        yield n
        n += 1


async def test_read_file_never_returns_the_secret_while_a_file_is_swapped_for_a_link(ws, ctx):
    (ws / "a.txt").write_text("inside")
    seen: set[str] = set()
    with _Swapper(ws / "a.txt", _outside(ws) / "secret.txt") as swapper:
        for _ in _race(swapper):
            reply = read_file("a.txt", ctx)
            seen.add(reply.get("content", "error"))
            assert reply.get("content") != SECRET, "read through a link swapped in after the check"
    assert swapper.swaps > 100
    assert "inside" in seen  # the race really ran: the file was read when it was a file


async def test_write_file_never_writes_outside_while_a_file_is_swapped_for_a_link(ws, ctx):
    (ws / "a.txt").write_text("inside")
    secret = _outside(ws) / "secret.txt"
    written = 0
    with _Swapper(ws / "a.txt", secret) as swapper:
        for _ in _race(swapper):
            written += "bytes" in (await write_file("a.txt", "overwritten", ctx))
    assert secret.read_text() == SECRET, "wrote through a link swapped in after the check"
    assert swapper.swaps > 100 and written > 0


# -- profile output --------------------------------------------------------------------------------------------------
def _profile_result() -> dict:
    ops = [{"name": "fusion", "time_ms": 1.0, "count": 1.0, "share": 1.0}]
    region = {"source": "host", "pallas_ms": None, "time_ms": 1.0, "ops": ops, "n_ops": 1}
    return {"status": "ok", "backend": "cpu", "regions": {"kernel": region, "baseline": dict(region)},
            "bytes": {"inputs": 1024, "outputs": 1024}, "runs": {"kernel": 3, "baseline": 3}}


class _FakePool:
    """WorkerPool for the output step alone: the job 'ran' and left a trace folder in its scratch."""

    def __init__(self, scratch: Path):
        self.scratch = scratch

    def __call__(self, size=0):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run(self, job, files, timeout):
        trace = self.scratch / job["trace_dir"] / "plugins" / "profile" / "run1"
        trace.mkdir(parents=True, exist_ok=True)
        (trace / "host.xplane.pb").write_bytes(b"xplane")
        (self.scratch / job["trace_dir"] / "summary.txt").write_text("trace notes")
        return SimpleNamespace(status="ok", result=_profile_result(), scratch=self.scratch, cleanup=lambda: None,
                               wall_s=1.0, returncode=0, stderr_tail="")


@pytest.fixture
def fake_pool(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(xc, "WorkerPool", _FakePool(scratch))
    kernel = tmp_path / "kernel.py"
    kernel.write_text("def workload(*a):\n    return a\n")
    return kernel


def test_a_profiles_link_in_the_cwd_is_refused(tmp_path, fake_pool, monkeypatch):
    cwd, outside = tmp_path / "root", tmp_path / "outside"
    cwd.mkdir()
    outside.mkdir()
    (cwd / "profiles").symlink_to(outside)
    monkeypatch.chdir(cwd)
    r = xc.xprof_capture("12p_RMSNorm", str(fake_pool))
    assert not r.ok and r.stage == "output" and "symbolic link" in r.error, r
    # A folder under a given root (a session workspace) is held to the same: no link on the way is followed.
    r = xc.xprof_capture("12p_RMSNorm", str(fake_pool), out_dir="profiles/0", out_root=str(cwd))
    assert not r.ok and r.stage == "output" and "symbolic link" in r.error, r
    assert list(outside.iterdir()) == []
    # Without the link the default folder is made under the cwd, a fresh one per run.
    (cwd / "profiles").unlink()
    r = xc.xprof_capture("12p_RMSNorm", str(fake_pool))
    assert r.ok, r.summary
    assert Path(r.out_dir).parent == cwd.resolve() / "profiles"
    assert Path(r.trace).read_bytes() == b"xplane"


def test_links_inside_an_out_folder_are_not_written_through(tmp_path, fake_pool):
    out, outside = tmp_path / "mine", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (outside / "summary.txt").write_text(SECRET)
    (out / "summary.txt").symlink_to(outside / "summary.txt")  # a file link planted in the person's folder
    (out / "plugins").symlink_to(outside)  # and a folder link on the trace's own path
    r = xc.xprof_capture("12p_RMSNorm", str(fake_pool), out_dir=str(out))
    assert (outside / "summary.txt").read_text() == SECRET
    assert sorted(p.name for p in outside.iterdir()) == ["summary.txt"]
    assert r.ok, r.summary
    assert any("summary.txt" in s for s in r.skipped_files) and any("plugins" in s for s in r.skipped_files)
    assert r.trace is None


def test_cli_profile_out_does_not_follow_links_inside(tmp_path, fake_pool, capsys):
    from maxkernel.cli import main

    link_to_out = tmp_path / "elsewhere"  # the person's own --out may itself be a link: that is theirs to make
    real = tmp_path / "real_out"
    real.mkdir()
    link_to_out.symlink_to(real)
    outside = tmp_path / "outside"
    outside.mkdir()
    (real / "summary.txt").symlink_to(outside / "planted.txt")  # dangling: a write would create it outside
    rc = main(["profile", "--task", "12p_RMSNorm", "--kernel", str(fake_pool), "--out", str(link_to_out)])
    out = capsys.readouterr()
    assert rc == 0, out
    assert list(outside.iterdir()) == []
    assert (real / "plugins" / "profile" / "run1" / "host.xplane.pb").read_bytes() == b"xplane"
    assert "trace:" in out.out
