"""The MCP tool layer without a transport: the served functions are the sub-agents' own, schemas come from their
signatures, arguments are confined to the root, failures are error results, a cancel kills the call's workers."""

from __future__ import annotations

import asyncio
import threading

import pytest
from google.adk.artifacts import InMemoryArtifactService

from maxkernel.mcpserver import tools as served
from maxkernel.mcpserver.tools import TASK_TOOLS, ServedTool, ToolHost, served_functions, served_tools

pytestmark = pytest.mark.unit


def _agent_tool_functions() -> list:
    from maxkernel.agents.sub_agents import ROLES

    return [t for build in ROLES.values() for t in build("gemini-2.5-flash").tools]


def test_the_served_functions_are_the_sub_agents_own():
    agents = _agent_tool_functions()
    fns = served_functions()
    extra = [served._resolve(s) for s in TASK_TOOLS]
    assert all(any(f is a for f in fns) for a in agents)  # the same function objects, not copies
    assert all(any(f is a for a in agents) or any(f is e for e in extra) for f in fns)
    assert len(fns) == len({id(f) for f in fns})
    names = {f.__name__ for f in fns}
    assert {"task_info", "list_tasks", "compile_kernel", "test_kernel", "evaluate_kernel", "profile_kernel",
            "tune_kernel", "estimate_kernel", "make_task", "read_file", "write_file", "chip_specs"} <= names


def test_a_tool_added_to_a_sub_agent_is_served_without_more_code(monkeypatch):
    from maxkernel.agents import sub_agents

    def count_lines(path: str) -> dict:
        """Counts lines.

        Args:
            path: A file.
        """
        return {"lines": 0}

    build = sub_agents.ROLES["tester"]

    def with_more(model, **kw):
        agent = build(model, **kw)
        agent.tools.append(count_lines)
        return agent

    monkeypatch.setitem(sub_agents.ROLES, "tester", with_more)
    assert any(f is count_lines for f in served_functions())


def test_schemas_come_from_the_signatures_and_docstrings():
    by_name = {t.name: t for t in served_tools()}
    compile_schema = by_name["compile_kernel"].input_schema()
    props = compile_schema["properties"]
    assert "tool_context" not in props
    assert props["path"]["default"] == "kernel.py" and "Kernel file" in props["path"]["description"]
    assert props["chip"]["default"] == ""  # the tool's own chip argument keeps its own meaning
    assert set(props) == {"path", "chip", "task", "size"}
    assert by_name["make_task"].input_schema()["required"] == ["function", "args"]
    assert by_name["make_task"].input_schema()["properties"]["args"]["type"] == "array"
    assert "task" not in by_name["pallas_api"].input_schema()["properties"]  # no tool_context, no session args
    assert by_name["evaluate_kernel"].description.startswith("The harness's trusted verdict")


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    r.mkdir()
    (r / "kernel.py").write_text("print('hi')\n")
    (tmp_path / "secret.py").write_text("SECRET = 1\n")
    return r


@pytest.fixture
def host(root):
    return ToolHost(root, artifacts=InMemoryArtifactService())


def _run(coro):
    return asyncio.run(coro)


def test_files_inside_the_root_are_read_and_written(host, root):
    r = _run(host.call("read_file", {"path": "kernel.py"}))
    assert r == {"path": "kernel.py", "content": "print('hi')\n"}
    w = _run(host.call("write_file", {"path": "sub/k.py", "content": "x = 1\n"}))
    assert w["bytes"] == 6 and (root / "sub" / "k.py").read_text() == "x = 1\n"
    assert _run(host.call("list_files", {}))["files"] == ["kernel.py", "sub/k.py"]


@pytest.mark.parametrize("path", ["../secret.py", "/etc/passwd", "sub/../../secret.py"])
def test_a_path_outside_the_root_is_an_error_and_never_read(host, path):
    for tool in ("read_file", "compile_kernel", "evaluate_kernel"):
        r = _run(host.call(tool, {"path": path, "task": "8p_GEMM"}))
        assert r["status"] == "error" and r["error_kind"] == "bad_argument" and "refused" in r["message"]
        assert "SECRET" not in str(r) and "root:" not in str(r)


def test_a_task_folder_outside_the_root_is_refused(host, tmp_path):
    outside = tmp_path / "task_out"
    outside.mkdir()
    (outside / "baseline.py").write_text("CONFIG = {}\n")
    for task in (str(outside), "../task_out", "no_such_task"):
        r = _run(host.call("task_info", {"task": task}))
        assert r["status"] == "error", task
    assert "outside the workspace root" in _run(host.call("task_info", {"task": str(outside)}))["message"]


def test_bad_chip_bad_arguments_unknown_tool_and_missing_task_are_error_results(host):
    r = _run(host.call("compile_kernel", {"task": "8p_GEMM", "chip": "v9"}))
    assert r["status"] == "error" and "unknown chip 'v9'" in r["message"] and "v5e" in r["hint"]
    r = _run(host.call("estimate_kernel", {"task": "8p_GEMM", "chip": "tpu9000"}))
    assert r["status"] == "error" and "unknown chip" in r["message"]
    r = _run(host.call("tune_kernel", {"task": "8p_GEMM", "max_configs": "many"}))
    assert r["error_kind"] == "malformed_tool_call" and "max_configs" in r["message"]
    assert _run(host.call("no_such_tool", {}))["error_kind"] == "unknown_tool"
    r = _run(host.call("task_info", {}))
    assert r["status"] == "error" and "needs a task" in r["message"]
    r = _run(host.call("task_info", {"task": "8p_GEMM", "size": "huge"}))
    assert r["error_kind"] == "bad_argument" and "no size 'huge'" in r["message"]
    r = _run(host.call("chip_specs", {"chip": "v9"}))
    assert r["status"] == "error" and r["ok"] is False  # an older tool's {"error"} in the house shape
    assert _run(host.call("chip_specs", {"chip": "v5e"}))["name"] == "v5e"


def test_a_crashing_tool_is_an_error_result_and_the_host_carries_on(root):
    def boom(x: int = 1) -> dict:
        """Raises."""
        raise RuntimeError("kaput")

    def fine() -> dict:
        """Answers."""
        return {"ok": True}

    host = ToolHost(root, tools=[ServedTool.of(boom), ServedTool.of(fine)], artifacts=InMemoryArtifactService())
    r = _run(host.call("boom", {}))
    assert r["error_kind"] == "tool_crashed" and "RuntimeError: kaput" in r["message"]
    assert _run(host.call("fine", {})) == {"ok": True}


def test_task_info_runs_with_a_real_tool_context(host):
    r = _run(host.call("task_info", {"task": "8p_GEMM", "size": "smoke"}))
    assert r["task"] == "8p_GEMM" and r["size"] == "smoke" and r["inputs"]


def test_cancelling_a_call_kills_the_workers_it_started(root):
    """A sync tool blocked in its thread: the cancel reaches the worker it adopted into the call's scope."""
    from maxkernel.harness.sandbox import cancel

    class FakeWorker:
        cancel_scope = None

        def __init__(self):
            self.killed = threading.Event()

        def kill(self):
            self.killed.set()

    worker = FakeWorker()
    entered = threading.Event()

    def slow() -> dict:
        """Waits on its worker."""
        cancel.current().adopt(worker)
        entered.set()
        worker.killed.wait(30)
        return {"ok": True}

    host = ToolHost(root, tools=[ServedTool.of(slow)], artifacts=InMemoryArtifactService())

    async def go():
        task = asyncio.create_task(host.call("slow", {}))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    _run(go())
    assert worker.killed.is_set()


def test_make_task_names_a_file_inside_the_root(host, root):
    """make_task's FILE.py is confined to the root, in any spelling of .py (that its code never runs in the server is
    tests/mcpserver/test_no_client_code.py)."""
    r = _run(host.call("make_task", {"function": "../secret.py:f", "args": ["f32[8]"]}))
    assert r["status"] == "error" and "leaves the workspace" in r["message"]
    r = _run(host.call("make_task", {"function": "../secret.PY:f", "args": ["f32[8]"]}))
    assert r["status"] == "error" and "leaves the workspace" in r["message"]


@pytest.mark.parametrize("args, says", [
    ({"program": "../secret.py:f", "args": ["f32[8]"]}, "leaves the workspace"),
    ({"program": "kernel.py:f", "inputs": "../secret.py:g"}, "leaves the workspace"),
    ({"program": "kernel.py:f"}, "arguments once"),
    ({"program": "kernel.py:f", "args": ["f32[8]"], "inputs": "kernel.py:g"}, "arguments once"),
    ({"program": "kernel.py:f", "args": ["f32[8]"], "chip": "h100"}, "unknown TPU chip"),
    ({"program": "kernel.py:f", "args": ["f32[8]"], "flops": -1}, "flops"),
    ({"program": "kernel.py", "args": ["f32[8]"]}, "FILE.py:FUNCTION"),
    ({"program": "nope.py:f", "args": ["f32[8]"]}, "no draft file"),
    ({"program": "kernel.py:f", "args": "f32[8]"}, "args"),
])
def test_estimate_program_refuses_bad_arguments_in_one_error(host, args, says):
    """estimate_program's files are confined to the root, its arguments checked before any job runs: each mistake
    is one error result naming it (nothing is estimated, nothing raised)."""
    r = _run(host.call("estimate_program", args))
    assert r["status"] == "error" and says in r["message"], r
