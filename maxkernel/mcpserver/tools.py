"""The tools an MCP client gets: the sub-agents' own tool functions, plus a few task-level ones, each called with a
real ADK ToolContext over a session whose workspace is the server's root. Nothing here needs the `mcp` SDK."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import re
import typing
import uuid
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field, ValidationError, create_model

from maxkernel.tools.errors import tool_error

__all__ = ["ServedTool", "ToolHost", "served_functions", "served_tools", "is_error", "TASK_TOOLS"]

_log = logging.getLogger("maxkernel.mcp")

# Task-level tools no sub-agent carries (the roots call them, or a person does from the CLI).
TASK_TOOLS = ("maxkernel.tools.lookup:list_tasks", "maxkernel.tools.session_tools:evaluate_kernel",
              "maxkernel.tools.task_builder:make_task", "maxkernel.tools.estimate_program:estimate_program")

# What a tool that takes `tool_context` reads from the session, offered as arguments of its own.
_SESSION_ARGS = {
    "task": (str, Field(default="", description="The task: a suite task name (e.g. 8p_GEMM; list_tasks shows them) or "
                        "a task folder inside the workspace root.")),
    "size": (str, Field(default="smoke", description="Input size: smoke (CPU-sized, default) or full.")),
    "chip": (str, Field(default="v5e", description="Target chip: v4, v5e, v5p, v6e or 7x (h100, h200 for GPU "
                        "lowering).")),
}
_CHIP_HINT = ("valid chips: v4, v5e, v5p, v6e, 7x (\"TPU v5e\", \"v5litepod\" also work); h100, h200 for GPU "
              "lowering")


def _resolve(spec: str) -> Callable:
    import importlib

    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def served_functions() -> list[Callable]:
    """Every sub-agent's tool functions (in role order, once each), then TASK_TOOLS: the same function objects the
    agents call, so a tool added to a sub-agent is served with no more code."""
    from maxkernel.agents.sub_agents import ROLES

    found: list[Callable] = []
    for build in ROLES.values():
        agent = build("gemini-2.5-flash")  # a name only: building an agent connects to nothing
        for tool in agent.tools:
            fn = tool if inspect.isfunction(tool) else getattr(tool, "func", None)
            if fn is not None and fn not in found:
                found.append(fn)
    for spec in TASK_TOOLS:
        fn = _resolve(spec)
        if fn not in found:
            found.append(fn)
    return found


def _arg_docs(doc: str) -> dict[str, str]:
    """Google-style `Args:` entries of a docstring: name -> text (continuation lines joined)."""
    out: dict[str, str] = {}
    inside, name = False, None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped == "Args:":
            inside = True
            continue
        if inside and re.fullmatch(r"[A-Z][a-z]+:", stripped):
            break
        if not inside or not stripped:
            continue
        m = re.match(r"(\w+)(?: \(.*?\))?: (.*)", stripped)
        if m and line.startswith(" " * 4) and not line.startswith(" " * 9):
            name = m.group(1)
            out[name] = m.group(2)
        elif name:
            out[name] += " " + stripped
    return out


@dataclasses.dataclass(frozen=True)
class ServedTool:
    """One served function: its MCP name, description and argument model, all read from the function itself."""

    name: str
    fn: Callable
    description: str
    args: type[BaseModel]
    session: bool  # takes a ToolContext: task, size and chip become arguments of their own

    @classmethod
    def of(cls, fn: Callable) -> "ServedTool":
        hints = typing.get_type_hints(fn)
        params = inspect.signature(fn).parameters
        doc = inspect.getdoc(fn) or fn.__name__
        docs = _arg_docs(doc)
        fields: dict[str, Any] = {}
        session = "tool_context" in params
        for p in params.values():
            if p.name == "tool_context":
                continue
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[p.name] = (hints.get(p.name, Any), Field(default=default, description=docs.get(p.name)))
        if session:
            for name, spec in _SESSION_ARGS.items():
                fields.setdefault(name, spec)  # a tool's own `chip` (compile_kernel) keeps its own meaning
        model = create_model(f"{fn.__name__}_arguments", **fields)
        return cls(fn.__name__, fn, doc, model, session)

    def input_schema(self) -> dict:
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        return schema


def served_tools() -> list[ServedTool]:
    return [ServedTool.of(fn) for fn in served_functions()]


def _normalised(result: Any) -> dict:
    """The tool's result as a dict; an older tool's bare {"error": ...} in the house error shape."""
    if isinstance(result, BaseModel):
        result = result.model_dump()
    if not isinstance(result, dict):
        result = {"result": result}
    if result.get("status") != "error" and isinstance(result.get("error"), str) and not result.get("ok", False) \
            and "summary" not in result:
        return {**tool_error(result["error"], "read the message, fix the arguments and call again"), **result}
    return result


def is_error(result: dict) -> bool:
    """An error result (the house shape). A kernel that fails to compile or to pass is an answer, not an error."""
    return result.get("status") == "error"


class ToolHost:
    """Calls served tools for one server: arguments validated against the tool's own model, paths confined to
    `root`, session tools given a real ToolContext (an ADK session with state {task, size, chip, workspace: root}
    in an in-memory session service, artifacts in the settings' artifact store).

    Anyone who can reach the server can write into the root, so no code in the root runs in this process: every
    call runs with folder tasks' code confined to sandboxed jobs (tasks.folder_code_sandboxed), a task folder known
    here only by the facts a job read, make_task's function imported only inside its build job."""

    def __init__(self, root: Path, tools: list[ServedTool] | None = None, artifacts=None):
        from google.adk.agents import BaseAgent
        from google.adk.sessions import InMemorySessionService

        from maxkernel.agents.services import artifact_service

        self.root = Path(root).resolve()
        self.tools = {t.name: t for t in (tools if tools is not None else served_tools())}
        self.sessions = InMemorySessionService()
        self.artifacts = artifacts if artifacts is not None else artifact_service()
        self.agent = BaseAgent(name="mcp_client", description="An MCP client calling maxkernel's tools.")

    # -- argument checks: every refusal is an error result, nothing outside the root is read ------------------
    def _task(self, task: str) -> str:
        """A suite name as it is; a task folder only inside the root (or one make_task wrote under the data
        folder's tasks/), as an absolute path."""
        import jaxbench
        from maxkernel.settings import get_settings
        from maxkernel.tools.workspace import WorkspaceError, resolve

        if task in jaxbench.task_names("all"):
            return task
        made = (get_settings().data_dir / "tasks").resolve()
        candidate = Path(task)
        if candidate.is_absolute():
            try:
                target = candidate.resolve()
            except (OSError, ValueError) as exc:
                raise WorkspaceError(f"task {task!r} refused: {exc}") from exc
            if target.parent == made:
                return str(target)
            try:
                rel = str(target.relative_to(self.root))
            except ValueError:
                raise WorkspaceError(f"task {task!r} refused: it is outside the workspace root") from None
        else:
            rel = task
        target = resolve(self.root, rel)
        if not (target / "baseline.py").is_file():
            raise WorkspaceError(f"unknown task {task!r}: give a suite task name (list_tasks shows them) or a task "
                                 "folder with baseline.py inside the workspace root")
        return str(target)

    def _check(self, tool: ServedTool, args: dict) -> dict | None:
        """The house error for a bad argument, or None."""
        from maxkernel import chips
        from maxkernel.tools.workspace import WorkspaceError, resolve

        if "path" in args and isinstance(args["path"], str):
            try:
                resolve(self.root, args["path"])
            except WorkspaceError as exc:
                return tool_error(str(exc), f"give a path relative to the workspace root {self.root}, e.g. kernel.py")
        for key in ("function", "program", "inputs"):  # make_task's and estimate_program's FILE.py:FUNCTION
            spec = args.get(key)
            if tool.name in ("make_task", "estimate_program") and isinstance(spec, str) \
                    and spec.rpartition(":")[0].lower().endswith(".py"):
                try:
                    resolve(self.root, spec.rpartition(":")[0])
                except WorkspaceError as exc:
                    return tool_error(str(exc), "name a FILE.py:FUNCTION inside the workspace root")
        if tool.session:
            chip = args.get("chip")
            if isinstance(chip, str) and chip.strip():
                canonical = chips.canonical_name(chip)
                if canonical is None or not (chips.CHIPS[canonical].is_tpu or canonical in ("h100", "h200")):
                    return tool_error(f"unknown chip {chip!r}", _CHIP_HINT)
                args["chip"] = canonical
            if args.get("task"):
                try:
                    args["task"] = self._task(args["task"])
                except WorkspaceError as exc:
                    return tool_error(str(exc), "list_tasks shows the suite's tasks")
        return None

    # -- the call ---------------------------------------------------------------------------------------------
    async def call(self, name: str, arguments: dict | None, on_event: Callable[[str], None] | None = None) -> dict:
        """The tool's result dict (errors in the house shape); never raises but for cancellation. The call runs in
        a cancel scope of its own: when it is cancelled, every sandboxed job it started is killed (harness/sandbox/cancel.py).
        `on_event` hears one line per sandboxed job started and finished, from the harness's threads."""
        from maxkernel.harness.sandbox.cancel import CancelScope, cancel_scope
        from maxkernel.harness.verdict.task_facts import described
        from maxkernel.tasks import folder_code_sandboxed

        scope = CancelScope(on_event)
        with cancel_scope(scope), folder_code_sandboxed(described):
            try:
                return await self._call(name, arguments)
            except BaseException:  # cancelled (the client's cancel, the server shutting down): kill its jobs
                killed = scope.cancel()
                _log.info("%s cancelled; %d sandboxed job(s) killed", name, killed)
                raise

    async def _call(self, name: str, arguments: dict | None) -> dict:
        tool = self.tools.get(name)
        if tool is None:
            return tool_error(f"no tool named {name!r}", f"the tools are: {', '.join(sorted(self.tools))}",
                              kind="unknown_tool")
        try:
            args = tool.args.model_validate(arguments or {}).model_dump()
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
            return tool_error(f"{name}: bad arguments: {problems}", "call it again with the arguments as declared "
                              "in its input schema", kind="malformed_tool_call")
        refused = self._check(tool, args)
        if refused is not None:
            return refused
        try:
            if tool.session:
                result = await self._call_in_session(tool, args)
            else:
                result = await self._run(tool.fn, args)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - a tool's crash is an answer; the server stays up
            if isinstance(exc, KeyError) and exc.args == ("task",):
                return tool_error(f"{name} needs a task", "pass task: a suite task name (list_tasks shows them) or a "
                                  "task folder inside the workspace root")
            from maxkernel.tasks import TaskError

            if isinstance(exc, TaskError):  # an unknown size, a task folder that does not load: the caller's input
                return tool_error(f"{name}: {exc}", "list_tasks shows the tasks; sizes are smoke and full")
            detail = str(exc).split("\n\n")[0]
            return tool_error(f"{name} failed: {type(exc).__name__}: {detail}",
                              "check the arguments; if it happens again, carry on without this tool", kind="tool_crashed")
        return _normalised(result)

    async def _call_in_session(self, tool: ServedTool, args: dict) -> Any:
        from google.adk.agents.invocation_context import InvocationContext
        from google.adk.tools import ToolContext

        own = inspect.signature(tool.fn).parameters
        state = {"size": args.get("size") or "smoke", "chip": args.get("chip") or "v5e", "workspace": str(self.root)}
        if args.get("task"):
            state["task"] = args["task"]
        session = await self.sessions.create_session(app_name="maxkernel_mcp", user_id="mcp", state=state)
        try:
            ic = InvocationContext(session_service=self.sessions, artifact_service=self.artifacts,
                                   invocation_id=f"e-{uuid.uuid4().hex[:12]}", agent=self.agent, session=session)
            call_args = {k: v for k, v in args.items() if k in own}
            return await self._run(tool.fn, {**call_args, "tool_context": ToolContext(ic)})
        finally:
            await self.sessions.delete_session(app_name="maxkernel_mcp", user_id="mcp", session_id=session.id)

    @staticmethod
    async def _run(fn: Callable, kwargs: dict) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(**kwargs)
        return await asyncio.to_thread(fn, **kwargs)  # off the event loop: the server keeps answering
