"""The porter's tools: the port being worked on lives in session state ("port": what `maxkernel port` was told);
the equivalence verdict comes from the harness, never from the agent."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

from google.adk.tools import ToolContext

from maxkernel.tools.errors import tool_error
from maxkernel.tools.workspace import WorkspaceError, resolve, workspace_dir

__all__ = ["check_port", "entry_function", "spec_from_state", "PORT_FILE"]

PORT_FILE = "jax_port.py"


def entry_function(path: Path) -> str | None:
    """The operator in a port file: its first public top-level function."""
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (SyntaxError, OSError, ValueError):
        return None
    return next((n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")), None)


def spec_from_state(port: dict):
    """The PortSpec that `port` (state's record of the command's arguments) describes."""
    from maxkernel.port import build_spec

    return build_spec(port["source"], list(port.get("args") or []), kind=port.get("kind"), gens=port.get("gens"),
                      init=port.get("init"), dims=port.get("dims"), static=port.get("static"), smoke=port.get("smoke"),
                      oracle=port.get("oracle"))


async def check_port(tool_context: ToolContext, path: str = PORT_FILE, function: str = "", source: str = "",
                     args: list[str] | None = None, init: list[str] | None = None, dims: list[str] | None = None,
                     static: list[str] | None = None, backward: bool = False) -> dict:
    """Checks a JAX port against the original operator: both run in separate sandboxes on the same random inputs
    (3 seeds; the source's dtype and float32), compared with the harness's fixed tolerances.

    Args:
        path: The port file in the workspace (default jax_port.py).
        function: The operator's function in it; empty: the file's first public top-level function.
        source: Only outside a port session: the original, "FILE.py[:NAME]" in the workspace (a PyTorch module
            or function, or a Triton launcher); a port session's own original is used otherwise.
        args: With source: one spec per tensor argument, e.g. ["bf16[T=4096,H=2048]"].
        init: With source: a module's constructor arguments, e.g. ["dim=H"].
        dims: With source: named sizes no argument carries, e.g. ["F=11008"].
        static: With source: keyword arguments on every call, e.g. ["causal=True"].
        backward: With source: check the gradients too (the original's backward vs jax.vjp of the port).

    Returns:
        equivalent (true/false), summary, per-seed errors, and on a mismatch where (seed, dtype, output, the
        worst element's index, the port's and the original's values).
    """
    from maxkernel.port import SpecError, check_port as run_check

    port = tool_context.state.get("port")
    if not port and source:
        try:
            where, sep, op = str(source).rpartition(":")
            where, op = (where, op) if sep and where.endswith(".py") else (str(source), "")
            original = resolve(workspace_dir(tool_context), where)
            port = {"source": f"{original}:{op}" if op else str(original), "args": _list(args, "args"),
                    "init": _list(init, "init"), "dims": _list(dims, "dims"), "static": _list(static, "static"),
                    "backward": bool(backward)}
        except (WorkspaceError, ValueError) as exc:
            return tool_error(str(exc), "source is FILE.py[:NAME] inside the workspace; args like ['f32[R=64,C=128]']")
    if not port:
        return tool_error("no port is under way in this session", "give source and args (the original and its "
                          "argument specs), or start a port with `maxkernel port --from FILE.py`")
    try:
        target = resolve(workspace_dir(tool_context), str(path or PORT_FILE))
    except WorkspaceError as exc:
        return tool_error(str(exc), f"write the port to {PORT_FILE} in the workspace")
    if not target.is_file():
        return tool_error(f"no file {path!r} in the workspace", f"write the port to {PORT_FILE} first",
                          kind="missing_file")
    name = str(function or "").strip() or entry_function(target)
    if not name:
        return tool_error(f"{path} defines no public top-level function", "define the operator as a function, "
                          "e.g. def rmsnorm(x, weight, eps=1e-6): ...")
    try:
        spec = spec_from_state(port)
    except SpecError as exc:
        return tool_error(str(exc), "check source, args, init and dims (as for `maxkernel port`)")
    report = await asyncio.to_thread(run_check, spec, target, name, seeds=int(port.get("seeds") or 3),
                                  backward=bool(port.get("backward")))
    tool_context.state["port_report"] = report.model_dump()
    d = report.model_dump(exclude={"per_seed"})
    d["per_seed"] = [{k: v for k, v in row.items() if k != "outputs"} | {"max_rel_err": max(
        (o["rel_err"] for o in row.get("outputs", [])), default=None)} for row in report.per_seed]
    return d


def _list(value, what: str) -> list[str]:
    if value in (None, ""):
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings like ['dim=H']")
    return list(value)


async def start_port(tool_context: ToolContext, source: str, args: list[str], init: list[str] | None = None,
                     dims: list[str] | None = None, static: list[str] | None = None, kind: str = "",
                     oracle: str = "") -> dict:
    """Starts porting a person's GPU operator (PyTorch module or function, Triton launcher, CUDA kernel) to JAX;
    the porter then writes jax_port.py and the harness checks it against the original.

    Args:
        source: "FILE.py" or "FILE.py:NAME" in the person's drafts folder (NAME: the nn.Module class, function,
            autograd.Function or Triton launcher).
        args: One spec per tensor argument, in order, e.g. ["bf16[T=4096,H=2048]"].
        init: A module's constructor arguments, e.g. ["dim=H"] (a dim name follows the size).
        dims: Named sizes no argument carries, e.g. ["F=11008"] for ["hidden=F"].
        static: Keyword arguments on every call, e.g. ["causal=True"].
        kind: "torch", "triton" or "cuda"; empty: read from the source's imports.
        oracle: For a CUDA source: "FILE.py:FN" in the drafts folder, a PyTorch function with its semantics.

    Returns:
        {"ok", "name", "kind", "params", "summary"}; {"error"} for input that could not be understood.
    """
    from maxkernel.port import SpecError, build_spec
    from maxkernel.port.check import describe
    from maxkernel.settings import get_settings
    from maxkernel.tools.drafts import DraftError, resolve_draft

    try:
        args, init, dims, static = (_list(v, w) for v, w in ((args, "args"), (init, "init"), (dims, "dims"),
                                                                (static, "static")))
        if not args:
            raise ValueError("args must name each tensor argument, e.g. ['bf16[T=4096,H=2048]']")
        where, sep, name = str(source or "").rpartition(":")
        where, name = (where, name) if sep and where.endswith(".py") else (str(source or ""), "")
        path = resolve_draft(where)
        found_oracle = None
        if oracle:
            o_where, _, o_name = str(oracle).rpartition(":")
            found_oracle = f"{resolve_draft(o_where)}:{o_name}"
        spec = build_spec(f"{path}:{name}" if name else str(path), args, kind=kind or None, init=init, dims=dims,
                          static=static, oracle=found_oracle)
    except (DraftError, SpecError, ValueError) as exc:
        return tool_error(str(exc), "source is FILE.py[:NAME] in the drafts folder; args like ['bf16[T=4096,H=2048]']")
    info = await asyncio.to_thread(describe, spec)
    if info.get("status") != "ok":
        return {"ok": False, "summary": f"the original could not be loaded on CPU: {info.get('error')}"}
    ws = Path(tool_context.state.get("workspace") or get_settings().data_dir / "workspaces" / tool_context.session.id)
    ws.mkdir(parents=True, exist_ok=True)
    port = {"source": f"{spec.source}:{spec.name}", "file": str(spec.source), "name": spec.name, "kind": spec.kind,
            "args": args, "gens": [], "init": init, "dims": dims, "static": static, "smoke": [],
            "oracle": found_oracle}
    # The person's request to port is their approval of writing jax_port.py: no kernel plan gates it.
    tool_context.state.update({"port": port, "port_params": info.get("params", []), "port_feedback": "",
                               "port_report": None, "debug_round": 0, "workspace": str(ws),
                               "require_plan_approval": False})
    return {"ok": True, "name": spec.name, "kind": info["kind"], "params": info.get("params", []),
            "summary": f"Ready to port {spec.name} ({info['kind']}); the porter writes jax_port.py next."}


async def adopt_port(tool_context: ToolContext, name: str = "") -> dict:
    """Checks the porter's jax_port.py against the original again (the harness's own run, whatever was said
    before) and, when it is equivalent, makes it a validated task; nothing is optimised yet.

    Args:
        name: Optional task name (default: port_<source file name>).

    Returns:
        {"ok": true, "path", "summary", "checks"} for a task made from a proven port (ask the person before
        select_task with "path"); {"ok": false, "summary", "mismatch"} when the port is not equivalent (the
        porter gets where it differs in its next round).
    """
    import re

    from maxkernel.port import SpecError, check_port as run_check
    from maxkernel.port.folder import make_folder
    from maxkernel.settings import get_settings

    port = tool_context.state.get("port")
    if not port:
        return tool_error("no port is under way in this session", "call start_port first")
    target = workspace_dir(tool_context) / PORT_FILE
    fn = entry_function(target) if target.is_file() else None
    if not fn:
        return {"ok": False, "summary": f"no usable {PORT_FILE} in the workspace yet: call porter first"}
    try:
        spec = spec_from_state(port)
    except SpecError as exc:
        return tool_error(str(exc), "start the port again with start_port")
    report = await asyncio.to_thread(run_check, spec, target, fn, seeds=int(port.get("seeds") or 3),
                                  backward=bool(port.get("backward")))
    tool_context.state["port_report"] = report.model_dump()
    if not report.equivalent:
        from maxkernel.port.check import feedback_text

        tool_context.state["port_feedback"] = feedback_text(report.model_dump())
        tool_context.state["debug_round"] = int(tool_context.state.get("debug_round") or 0) + 1
        return {"ok": False, "summary": report.summary, "mismatch": report.mismatch}
    task_name = re.sub(r"[^A-Za-z0-9_]+", "_", name or f"port_{spec.source.stem}").strip("_") or "port"
    out = get_settings().data_dir / "tasks" / task_name
    try:
        task = await asyncio.to_thread(make_folder, spec, report, target, fn, out, force=True)
    except SpecError as exc:
        return tool_error(str(exc), "declare the size with dims, e.g. ['F=11008']")
    if not task.ok:
        return {"ok": False, "summary": f"the port is equivalent but the task was refused: {task.reason}"}
    return {"ok": True, "path": task.path, "summary": f"{report.summary}. Task made: {task.summary}",
            "checks": task.checks}
