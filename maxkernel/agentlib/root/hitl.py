"""The human-in-the-loop policy: a chat root that routes a person's requests to the sub-agents as tools and
asks for the plan's approval (ADK tool confirmation) before any code is written."""

from __future__ import annotations

import asyncio
from pathlib import Path

from google.adk import Agent
from google.adk.tools import FunctionTool, ToolContext

import jaxbench
from maxkernel.agentlib.root.prompt import HITL_INSTRUCTION
from maxkernel.settings import get_settings

__all__ = ["build_hitl_root", "select_task", "submit_plan", "judge_kernel"]


def select_task(task: str, tool_context: ToolContext, size: str = "smoke") -> dict:
    """Sets the task this session works on.

    Args:
        task: A jaxbench task name (e.g. "12p_RMSNorm") or a folder with baseline.py.
        size: "smoke" (CPU-sized, default) or "full".

    Returns:
        {"task", "size", "chip"} or {"error"} listing how to find task names.
    """
    from maxkernel.tasks import TaskError, load_task

    try:
        t = load_task(task)
    except TaskError as exc:
        return {"error": str(exc), "some_tasks": jaxbench.task_names()[:12]}
    if size not in t.sizes:
        return {"error": f"size must be one of {t.sizes}"}
    s = get_settings()
    ws = s.data_dir / "workspaces" / tool_context.session.id
    ws.mkdir(parents=True, exist_ok=True)
    tool_context.state.update({"task": t.name if t.source == "jaxbench" else str(t.path), "size": size,
                               "chip": tool_context.state.get("chip") or s.chip, "workspace": str(ws),
                               "require_plan_approval": True, "plan_approved": False,
                               "debug_round": 0, "last_error": ""})
    return {"task": t.name, "size": size, "chip": tool_context.state["chip"]}


def submit_plan(plan: str, tool_context: ToolContext) -> dict:
    """Shows the plan to the person for approval; code is written only after they approve it.

    Args:
        plan: The plan to approve, as the planner wrote it.

    Returns:
        {"approved": true} once the person approved it.
    """
    # A newly approved plan means a new kernel: its debugging starts over.
    tool_context.state.update({"plan": plan, "plan_approved": True, "debug_round": 0, "last_error": ""})
    return {"approved": True}


async def judge_kernel(tool_context: ToolContext, path: str = "kernel.py") -> dict:
    """The harness's trusted verdict on a kernel in the workspace: sandboxed, several seeds, integrity checks.

    Args:
        path: Kernel file in the workspace (default kernel.py).

    Returns:
        status (correct, incorrect, error, timeout, rejected), reason, error vs tolerance, speedup, flags.
    """
    from maxkernel.harness.evaluate import shared_evaluator
    from maxkernel.tools.workspace import WorkspaceError, resolve, workspace_dir

    try:
        kernel = resolve(workspace_dir(tool_context), path)
    except WorkspaceError as exc:
        return {"error": str(exc)}
    if not Path(kernel).is_file():
        return {"error": f"no file {path!r} in the workspace"}
    v = await asyncio.to_thread(shared_evaluator().evaluate, tool_context.state["task"], kernel,
                                size=tool_context.state.get("size", "smoke"))
    summary = f"{v.status.upper()}: {v.reason}"
    tool_context.state["verdict_summary"] = summary[:500]
    # The debugger's instruction reads what failed and the round from state, as in the auto loop.
    failed = v.status != "correct"
    tool_context.state["last_error"] = f"judge_kernel: {summary}"[:3000] if failed else ""
    tool_context.state["debug_round"] = int(tool_context.state.get("debug_round") or 0) + 1 if failed else 0
    return {"status": v.status, "summary": summary, "max_rel_err": v.correctness.max_rel_err,
            "tolerance": v.correctness.tolerance, "speedup": v.speedup, "flags": v.flags,
            "timing_label": v.timing_label}


def build_hitl_root(pool: list, model) -> Agent:
    """The chat root: sub-agents offered as tools (single-turn), plan approval through tool confirmation."""
    return Agent(name="maxkernel_hitl", model=model, instruction=HITL_INSTRUCTION,
                 description="Works with a person: plans, asks approval, implements, tests, profiles, tunes.",
                 sub_agents=pool,
                 tools=[select_task, FunctionTool(submit_plan, require_confirmation=True), judge_kernel])
