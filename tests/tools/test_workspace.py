"""The scoped workspace: paths that leave it are refused; files written by an agent's tool call read back."""

from __future__ import annotations

from importlib import resources

import pytest
from google.adk import Runner
from google.adk.agents.invocation_context import InvocationContext
from google.adk.apps import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.sessions import InMemorySessionService
from google.adk.tools import ToolContext
from google.genai import types

from maxkernel.agents.replay import ReplayLlm
from maxkernel.agents.sub_agents import ROLES
from maxkernel.settings import get_settings
from maxkernel.tools import plans
from maxkernel.tools.workspace import WorkspaceError, list_files, read_file, resolve, write_file

pytestmark = pytest.mark.unit


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("not yours")
    return root


@pytest.mark.parametrize("rel", ["/etc/passwd", "", "../outside/secret.txt", "a/../../outside/secret.txt", "..",
                                 "sub/../../ws2/x.py", "a\0b.py"])
def test_resolve_refuses_escapes(ws, rel):
    with pytest.raises(WorkspaceError, match="refused"):
        resolve(ws, rel)


def test_resolve_refuses_symlinks_that_leave(ws, tmp_path):
    (ws / "door").symlink_to(tmp_path / "outside")
    (ws / "key.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    (ws / "new.py").symlink_to(tmp_path / "outside" / "planted.py")  # dangling: a write would land outside
    for rel in ("door", "door/secret.txt", "key.txt", "new.py"):
        with pytest.raises(WorkspaceError, match="leaves the workspace"):
            resolve(ws, rel)


def test_resolve_keeps_paths_inside(ws):
    (ws / "sub").mkdir()
    (ws / "alias.py").symlink_to(ws / "sub" / "kernel.py")  # a link that stays inside is fine
    assert resolve(ws, "kernel.py") == ws.resolve() / "kernel.py"
    assert resolve(ws, "sub/../kernel.py") == ws.resolve() / "kernel.py"
    assert resolve(ws, "./sub/k.py") == ws.resolve() / "sub" / "k.py"
    assert resolve(ws, "alias.py") == ws.resolve() / "sub" / "kernel.py"


async def _session(runner: Runner, state: dict):
    return await runner.session_service.create_session(app_name=runner.app_name, user_id="u", state=state)


def _tool_context(runner: Runner, session) -> ToolContext:
    """The context ADK hands a tool, over the same session and artifact store as the run."""
    ic = InvocationContext(session_service=runner.session_service, artifact_service=runner.artifact_service,
                           invocation_id="e-test", agent=runner.agent, session=session)
    return ToolContext(ic)


@pytest.fixture
def runner():
    """A one-agent app: the implementer on the replay model, whose recorded turn calls write_file."""
    app = App(name="ws", root_agent=ROLES["implementer"](ReplayLlm(role="implementer")))
    return Runner(app=app, session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService())


async def test_write_by_a_tool_call_reads_back(runner, ws):
    state = {"task": "12p_RMSNorm", "size": "smoke", "chip": "v5e", "iteration": 1, "workspace": str(ws)}
    session = await _session(runner, state)
    message = types.Content(role="user", parts=[types.Part(text="implement the plan")])
    events = [e async for e in runner.run_async(user_id="u", session_id=session.id, new_message=message)]
    replies = [r.response for e in events for r in e.get_function_responses() if r.name == "write_file"]
    expected = (resources.files("maxkernel.agents.replay") / "kernels" / "12p_RMSNorm_v1.py").read_text()
    assert replies == [{"path": "kernel.py", "bytes": len(expected.encode()), "artifact_version": 0}]
    assert (ws / "kernel.py").read_text() == expected

    session = await runner.session_service.get_session(app_name="ws", user_id="u", session_id=session.id)
    ctx = _tool_context(runner, session)
    assert read_file("kernel.py", ctx) == {"path": "kernel.py", "content": expected}
    assert (await ctx.load_artifact("kernel.py")).text == expected  # every write is also an artifact version
    assert list_files(ctx) == {"files": ["kernel.py"]}

    # A second version, in a sub-folder too: both on disk and as artifact versions.
    assert (await write_file("kernel.py", "v2\n", ctx))["artifact_version"] == 1
    assert (await write_file("notes/plan.md", "plan\n", ctx))["artifact_version"] == 0
    assert read_file("kernel.py", ctx)["content"] == "v2\n"
    assert (await ctx.load_artifact("notes__plan.md")).text == "plan\n"
    assert list_files(ctx) == {"files": ["kernel.py", "notes/plan.md"]}


async def test_tools_refuse_escapes_with_a_reply(runner, ws, tmp_path):
    session = await _session(runner, {"workspace": str(ws)})
    ctx = _tool_context(runner, session)
    (ws / "door").symlink_to(tmp_path / "outside")
    for rel in ("../outside/secret.txt", "door/secret.txt", "/etc/hostname"):
        assert "refused" in read_file(rel, ctx)["error"]
        assert "refused" in (await write_file(rel, "x", ctx))["error"]
    assert (tmp_path / "outside" / "secret.txt").read_text() == "not yours"
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == ["secret.txt"]
    assert "no file" in read_file("missing.py", ctx)["error"]
    assert "could not write" in (await write_file(".", "x", ctx))["error"]  # the workspace folder itself
    assert "too large" in (await write_file("big.py", "x" * (300 * 1024), ctx))["error"]


async def test_writes_wait_for_an_approved_plan(runner, ws):
    session = await _session(runner, {"workspace": str(ws), "require_plan_approval": True, "plan_approved": False})
    assert "no approved plan" in (await write_file("kernel.py", "x", _tool_context(runner, session)))["error"]
    # A bare flag is not an approval: only an approved version that is still the current plan counts.
    session = await _session(runner, {"workspace": str(ws), "require_plan_approval": True, "plan_approved": True})
    assert "no approved plan" in (await write_file("kernel.py", "x", _tool_context(runner, session)))["error"]
    assert not (ws / "kernel.py").exists()
    state = {"workspace": str(ws), "require_plan_approval": True}
    plans.decide(state, "tile rows by 8", approved=True)
    ctx = _tool_context(runner, await _session(runner, state))
    assert (await write_file("kernel.py", "x", ctx))["bytes"] == 1
    ctx.state["plan"] = "a new plan the planner wrote"  # the planner's output_key replaces the draft
    refused = (await write_file("kernel.py", "y", ctx))["error"]
    assert "plan v1 was approved" in refused and "submit_plan" in refused
    assert (ws / "kernel.py").read_text() == "x"


async def test_default_workspace_is_per_session_without_artifact_service(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXKERNEL_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    try:
        app = App(name="ws", root_agent=ROLES["implementer"](ReplayLlm(role="implementer")))
        runner = Runner(app=app, session_service=InMemorySessionService())  # no artifact store configured
        session = await _session(runner, {})
        reply = await write_file("kernel.py", "k\n", _tool_context(runner, session))
        assert reply == {"path": "kernel.py", "bytes": 2, "artifact_version": None}
        assert (tmp_path / "data" / "workspaces" / session.id / "kernel.py").read_text() == "k\n"
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
