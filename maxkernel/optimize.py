"""`maxkernel optimize`: one headless run of the autonomous agent on one task, through the real ADK Runner."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Callable

__all__ = ["OptimizeError", "run_optimize", "check_models", "summary_line", "render_text", "replay_refusal", "USER_ID",
           "REPLAY_LABEL"]

# The user id `adk web` uses, so a session started here can be opened there (same session URI).
USER_ID = "user"
REPLAY_LABEL = "offline replay model: recorded model turns, real tools and harness verdicts"
HITL_MESSAGE = ("HITL needs a person to approve plans: run `adk web maxkernel/apps` and pick the hitl app "
                "(add --session_service_uri/--artifact_service_uri to share this CLI's stores)")


class OptimizeError(ValueError):
    """A usage problem found before any work (unknown task or size, HITL asked headless, no credentials)."""


def _models(model: str | None) -> dict[str, str]:
    """Each sub-agent role's model name, credentials checked for all of them before anything starts."""
    from maxkernel.agents.models import ModelConfigError, check_credentials, model_name
    from maxkernel.agents.sub_agents import ROLES

    names = {role: model_name(role, override=model) for role in ROLES}
    for name in dict.fromkeys(names.values()):
        try:
            check_credentials(name)
        except ModelConfigError as exc:
            raise OptimizeError(str(exc)) from None
    return names


def check_models(task: str, model: str | None) -> tuple[dict[str, str], bool]:
    """Each role's model (credentials checked) and whether the replay model is among them. OptimizeError, before
    any work, when one cannot be reached or the replay model has no recording for `task` (a name or a folder)."""
    from maxkernel.agents.models import is_replay

    names = _models(model)
    replay = any(is_replay(n) for n in names.values())
    refusal = replay_refusal(task) if replay else None
    if refusal:
        raise OptimizeError(refusal)
    return names, replay


def _task_spec(task: str, size: str) -> str:
    from maxkernel.tasks import TaskError, load_task

    try:
        t = load_task(task)
    except TaskError as exc:
        raise OptimizeError(str(exc)) from None
    if size not in t.sizes:
        raise OptimizeError(f"task {t.name} has no size {size!r} (has {', '.join(t.sizes)})")
    return t.name if t.source == "jaxbench" else str(t.path)


def replay_refusal(task: str) -> str | None:
    """Why the replay model cannot optimise `task` (a suite name or a folder, matched by its name), said with what
    it can do and the settings for a real model; None when it has the recording."""
    from maxkernel.agents.models import MODEL_SETTINGS
    from maxkernel.agents.replay.model import loop_tasks, scope

    name = Path(task.rstrip("/")).name
    if name in loop_tasks():
        return None
    return (f"the replay model has no recording for {name}: it has recordings only for {scope()}; "
            f"for other tasks set {MODEL_SETTINGS}")


def _describe(event) -> list[str]:
    """Progress lines for one event: who spoke (the text on one line) and which tools were called."""
    from maxkernel.agents.roots._common import one_line

    # The root's own lines (verdicts, the answer) are ours and carry figures: kept longer than a model's prose.
    limit = 600 if event.author.startswith("maxkernel_") else 200
    lines = []
    for part in (event.content.parts if event.content else None) or []:
        if part.text and part.text.strip() and not getattr(part, "thought", False):
            lines.append(f"{event.author}: {one_line(part.text, limit)}")
        elif part.function_call:
            args = ", ".join(f"{k}={str(v)[:40]!r}" for k, v in (part.function_call.args or {}).items()
                             if k not in ("content", "source", "code"))
            lines.append(f"{event.author} -> {part.function_call.name}({args})")
    return lines


async def _run(app, spec: str, size: str, session_uri, artifact_uri, session_id, progress) -> tuple[dict, str]:
    from google.adk import Runner
    from google.genai import types

    from maxkernel.agents.services import artifact_service, session_service

    sessions = session_service(session_uri)
    runner = Runner(app=app, session_service=sessions, artifact_service=artifact_service(artifact_uri))
    try:
        session = None
        if session_id:
            session = await sessions.get_session(app_name=app.name, user_id=USER_ID, session_id=session_id)
        if session is None:
            session = await sessions.create_session(app_name=app.name, user_id=USER_ID, session_id=session_id)
            progress(f"session {session.id} (new)")
        else:
            progress(f"session {session.id} (resumed)")
        message = types.Content(role="user", parts=[types.Part(text=f"optimize {spec} {size}")])
        async for event in runner.run_async(user_id=USER_ID, session_id=session.id, new_message=message):
            for line in _describe(event):
                progress(line)
        session = await sessions.get_session(app_name=app.name, user_id=USER_ID, session_id=session.id)
        return dict(session.state), session.id
    finally:
        await runner.close()


def run_optimize(task: str, mode: str = "auto", model: str | None = None, size: str | None = None,
                 out: str | Path | None = None, session_uri: str | None = None, artifact_uri: str | None = None,
                 session_id: str | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """Run the autonomous agent on `task` and return the cli.md `optimize` document.

    Raises OptimizeError (before any work) for an unknown task or size, mode "hitl", missing credentials, or
    the replay model asked for a task it has no recording of.
    """
    from maxkernel.agents import build_app
    from maxkernel.agents.roots._common import default_size

    progress = progress or (lambda _line: None)
    size = size or default_size()  # full on attached TPU hardware, smoke on a CPU
    if mode == "hitl":
        raise OptimizeError(HITL_MESSAGE)
    if mode != "auto":
        raise OptimizeError(f"unknown mode {mode!r}: use auto (headless) or hitl (in adk web)")
    spec = _task_spec(task, size)
    names, replay = check_models(spec, model)
    shown = sorted(set(names.values()))
    progress(f"model: {', '.join(shown)}" + (f" ({REPLAY_LABEL})" if replay else ""))

    app = build_app(mode, model)
    state, sid = asyncio.run(_run(app, spec, size, session_uri, artifact_uri, session_id, progress))

    result = state.get("result") or {}
    usage = state.get("usage") or {}
    cost = usage.get("cost_usd", 0.0) if usage.get("priced", True) else None
    kernel = workspace_kernel = result.get("kernel")
    if out and kernel:
        dest = Path(out)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kernel, dest / "kernel.py")
        (dest / "verdict.json").write_text(json.dumps(result.get("verdict"), indent=2) + "\n")
        kernel = str((dest / "kernel.py").resolve())
    doc = {
        "status": result.get("status", "unfinished"),
        "kernel": kernel,  # in --out when given, else the session's workspace
        "workspace_kernel": workspace_kernel,
        "verdict": result.get("verdict"),
        "iterations": result.get("iterations", (state.get("loop") or {}).get("iteration", 0)),
        "llm_calls": usage.get("llm_calls", 0),
        "tokens": usage.get("tokens", 0),
        # An unpriced model's cost is unknown, not zero.
        "cost_usd": cost,
        "usage": {key: usage.get(key, default) for key, default in (
            ("llm_calls", 0), ("retries", 0), ("prompt_tokens", 0), ("output_tokens", 0), ("thought_tokens", 0),
            ("cached_tokens", 0), ("tokens", 0), ("max_prompt_tokens_per_call", 0), ("prompt_tokens_per_call", []),
            ("unpriced_models", []))} | {"cost_usd": cost},
        "faults": state.get("faults") or [],
        "failed_steps": result.get("failed_steps", (state.get("loop") or {}).get("failed_steps", 0)),
        "tuned": result.get("tuned"),
        "session_id": sid,
        "task": state.get("task", spec),
        "size": state.get("size", size),
        "stop_reason": result.get("stop_reason"),
        "model": shown[0] if len(shown) == 1 else names,
        "replay": replay,
    }
    if replay:
        doc["model_label"] = REPLAY_LABEL
    if state.get("faults_injected") is not None or any(n.startswith("faulty") for n in names.values()):
        doc["faults_injected"] = state.get("faults_injected") or []
    doc["summary"] = summary_line(doc)
    return doc


def summary_line(doc: dict) -> str:
    """The run's answer on one line, never cut: the returned kernel's path, its held-out verdict, and its TPU
    estimate against the XLA baseline (or the measured speedup on a TPU, or why there is no estimate)."""
    from maxkernel.agents.roots._common import one_line
    from maxkernel.agents.roots.auto import estimate_text

    if not doc.get("kernel"):
        return f"no kernel returned: {doc.get('status', 'unfinished').upper()} ({doc.get('stop_reason') or 'no result'})"
    v = doc.get("verdict") or {}
    status = (v.get("status") or doc.get("status") or "unknown").upper()
    why = "" if status == "CORRECT" else f" ({one_line(v.get('reason'), 300)})"
    return f"returned kernel {doc['kernel']}: held-out verdict {status}{why}; {estimate_text(v)}"


def render_text(doc: dict) -> str:
    """The `optimize` document as text: outcome, verdict, usage, session, and the summary line last."""
    v = doc.get("verdict") or {}
    lines = [f"{doc['status'].upper()}: {doc.get('stop_reason') or 'no result'}"]
    if v.get("reason"):
        lines.append(f"held-out verdict {v['status'].upper()}: {v['reason']}")
    if v.get("speedup") is not None:
        timing = "CPU interpreter time, not TPU time" if "cpu_timing" in v.get("flags", []) else v.get("backend")
        lines.append(f"measured speedup {v['speedup']:.3g}x ({timing})")
    cost = "unknown cost" if doc.get("cost_usd") is None else f"${doc['cost_usd']:.4f}"
    lines.append(f"{doc['iterations']} iterations, {doc['llm_calls']} LLM calls, {doc['tokens']} tokens, {cost}"
                 + (" (replay model)" if doc.get("replay") else f" ({doc['model']})"))
    if doc.get("faults"):
        kinds = sorted({f["kind"] for f in doc["faults"]})
        lines.append(f"{len(doc['faults'])} faults handled ({', '.join(kinds)}); {doc['failed_steps']} failed steps")
    lines.append(f"session: {doc['session_id']}")
    lines.append(doc.get("summary") or summary_line(doc))
    return "\n".join(lines)
