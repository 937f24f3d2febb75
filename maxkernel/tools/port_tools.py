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


async def check_port(tool_context: ToolContext, path: str = PORT_FILE, function: str = "") -> dict:
    """Checks a JAX port against the original operator: both run in separate sandboxes on the same random inputs
    (3 seeds; the source's dtype and float32), compared with the harness's fixed tolerances.

    Args:
        path: The port file in the workspace (default jax_port.py).
        function: The operator's function in it; empty: the file's first public top-level function.

    Returns:
        equivalent (true/false), summary, per-seed errors, and on a mismatch where (seed, dtype, output, the
        worst element's index, the port's and the original's values).
    """
    from maxkernel.port import SpecError, check_port as run_check

    port = tool_context.state.get("port")
    if not port:
        return tool_error("no port is under way in this session", "start one with `maxkernel port --from FILE.py` "
                          "or ask to port a file")
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
        return tool_error(str(exc), "the port's arguments in session state are unusable")
    report = await asyncio.to_thread(run_check, spec, target, name)
    tool_context.state["port_report"] = report.model_dump()
    d = report.model_dump(exclude={"per_seed"})
    d["per_seed"] = [{k: v for k, v in row.items() if k != "outputs"} | {"max_rel_err": max(
        (o["rel_err"] for o in row.get("outputs", [])), default=None)} for row in report.per_seed]
    return d
