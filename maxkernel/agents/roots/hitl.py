"""The human-in-the-loop policy: a chat root that routes a person's requests to the sub-agents as tools and
asks for the plan's approval (ADK tool confirmation) before any code is written."""

from __future__ import annotations

import asyncio
from pathlib import Path

from google.adk import Agent
from google.adk.tools import ToolContext

import jaxbench
from maxkernel.agents.roots.prompt import hitl_instruction
from maxkernel.settings import get_settings
from maxkernel.tools import plans
from maxkernel.tools.port_tools import adopt_port, start_port
from maxkernel.tools.task_builder import make_task

__all__ = ["build_hitl_root", "select_task", "submit_plan", "use_draft", "judge_kernel"]


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
                               "require_plan_approval": True, "plan_approved": False, "plan": "", "plans": [],
                               "approved_plan_version": None, "approved_plan": "",
                               "debug_round": 0, "last_error": ""})
    return {"task": t.name, "size": size, "chip": tool_context.state["chip"]}


async def submit_plan(tool_context: ToolContext, plan: str = "") -> dict:
    """Shows a plan to the person for approval, as a numbered version; code is written only while the approved
    version is the current plan.

    Args:
        plan: The plan to approve, as the planner wrote it; empty submits the session's current plan (the
            planner's last plan, or a plan file the person handed in with use_draft).

    Returns:
        {"approved": true, "version": N} once the person approved version N; {"approved": false, "version": N}
        when they rejected it; {"status": "awaiting_approval", "version": N} while the question is open.
    """
    state = tool_context.state
    text = (plan or state.get("plan") or "").strip()
    if not text:
        return {"error": "there is no plan to submit: call planner first, or pass the plan's text"}
    confirmation = tool_context.tool_confirmation
    if confirmation is None:
        version = plans.propose(state, text)
        tool_context.request_confirmation(
            hint=f"Approve plan v{version}? Answer confirmed=true to approve it, false to reject it.\n\n"
                 f"{text[:2000]}", payload={"version": version})
        tool_context.actions.skip_summarization = True  # the run pauses here until the person answers
        return {"status": "awaiting_approval", "version": version}
    version = plans.decide(state, text, bool(confirmation.confirmed))
    if not confirmation.confirmed:
        return {"approved": False, "version": version,
                "message": f"the person rejected plan v{version}: ask what to change, then plan again"}
    # A newly approved plan means a new kernel: its debugging starts over.
    state.update({"debug_round": 0, "last_error": ""})
    return {"approved": True, "version": version}


async def use_draft(path: str, tool_context: ToolContext, kind: str = "kernel") -> dict:
    """Continues from the person's own draft: a kernel file becomes the workspace's kernel.py, a plan file
    becomes the current plan (still to be approved with submit_plan).

    Args:
        path: The draft file the person named, on the machine this app runs on, inside the folder drafts
            are read from (the folder the app was started in, or MAXKERNEL_DRAFTS_DIR).
        kind: "kernel" (default) or "plan".

    Returns:
        For a kernel: {"kind", "path", "bytes", "static_check"}; for a plan: {"kind", "version", "plan"};
        or {"error"}.
    """
    from maxkernel.harness.sandbox.static_check import check_source
    from maxkernel.tools.drafts import DraftError, read_draft
    from maxkernel.tools.workspace import write_file_unchecked

    if kind not in ("kernel", "plan"):
        return {"error": f"kind must be 'kernel' or 'plan', not {kind!r}"}
    if not tool_context.state.get("task"):
        return {"error": "choose the task first (select_task), then hand in the draft"}
    try:
        text = read_draft(path)
    except DraftError as exc:
        return {"error": str(exc)}
    state = tool_context.state
    if kind == "plan":
        version = plans.propose(state, text.strip(), source="person")
        return {"kind": "plan", "version": version, "plan": text[:2000],
                "next": f"call submit_plan (no arguments) to ask the person to approve plan v{version}"}
    written = await write_file_unchecked("kernel.py", text, tool_context)
    if "error" in written:
        return written
    state.update({"debug_round": 0, "last_error": "", "draft_kernel": str(path)})
    return {"kind": "kernel", "path": "kernel.py", "bytes": written["bytes"],
            "static_check": check_source(text, "kernel.py") or "passes",
            "next": "judge_kernel gives the harness's verdict on it; changing it needs an approved plan"}


async def judge_kernel(tool_context: ToolContext, path: str = "kernel.py") -> dict:
    """The harness's trusted verdict on a kernel in the workspace: sandboxed, several seeds, integrity checks.

    Args:
        path: Kernel file in the workspace (default kernel.py).

    Returns:
        status (correct, incorrect, error, timeout, rejected), reason, error vs tolerance, speedup, flags.
    """
    from maxkernel.harness.verdict.evaluate import shared_evaluator
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


def _refresh_approval(tool, args, tool_context, tool_response):
    """After every root tool call (the planner's new plan included): plan_approved says whether the current
    plan is the approved version, so the instruction and the state never show a stale approval."""
    state = tool_context.state
    if state.get("require_plan_approval"):
        current = plans.gate(state) is None
        if state.get("plan_approved") != current:
            state["plan_approved"] = current
    return None


def build_hitl_root(pool: list, model) -> Agent:
    """The chat root: sub-agents offered as tools (single-turn), plan approval through tool confirmation."""
    return Agent(name="maxkernel_hitl", model=model, instruction=hitl_instruction,
                 description="Works with a person: plans, asks approval, implements, tests, profiles, tunes.",
                 sub_agents=pool, after_tool_callback=_refresh_approval,
                 tools=[select_task, make_task, start_port, adopt_port, submit_plan, use_draft, judge_kernel])
