"""What every root policy shares: reading the task from the request, session set-up, artifacts, messages."""

from __future__ import annotations

import re
from pathlib import Path

import jaxbench
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event, EventActions
from google.genai import types

from maxkernel.settings import get_settings

__all__ = ["attached_tpu", "default_size", "find_task", "one_line", "say", "save_text_artifact", "session_setup"]

_TASK = re.compile(r"\b(\d{1,2}[pk]_[A-Za-z0-9_]+|rw_[a-z0-9_]+)\b")
_SIZE = re.compile(r"\b(smoke|full)\b")


def one_line(text: str | None, limit: int = 200) -> str:
    """A message folded onto one line, at most `limit` characters: a multi-line error keeps its reason
    ("compile_kernel for v5e failed:\n<why>" reads "compile_kernel for v5e failed: <why>"), and a long one is cut in
    the middle, so both its subject and its end (the figure, the reason, the path) survive."""
    flat = " ".join((text or "").split())
    if len(flat) <= limit:
        return flat
    head = (limit - 1) * 3 // 5
    return flat[:head] + "…" + flat[len(flat) - (limit - 1 - head):]


def find_task(text: str) -> str | None:
    """The suite task named in a request ("optimize 12p_RMSNorm", "optimize rw_rglru_scan": either suite), or a
    folder path holding baseline.py."""
    for m in _TASK.finditer(text or ""):
        if m.group(1) in jaxbench.task_names("all"):
            return m.group(1)
    for word in (text or "").split():
        if (Path(word) / "baseline.py").is_file():
            return str(Path(word).resolve())
    return None


def request_text(ctx: InvocationContext) -> str:
    content = ctx.user_content
    return " ".join(p.text for p in (content.parts if content else []) if p.text) if content else ""


def attached_tpu() -> str | None:
    """The chip of an attached TPU (this process's JAX backend), or None off a TPU. Without a TPU device node
    (/dev/accel*, /dev/vfio) JAX is not asked, so a CPU machine never starts libtpu's runtime."""
    from maxkernel.chips import accelerator_nodes

    if not accelerator_nodes():
        return None
    try:
        import jax

        if jax.default_backend() != "tpu":
            return None
        from maxkernel import chips

        chip = chips.from_device_kind(jax.devices()[0].device_kind)
        return chip.name if chip else None
    except Exception:  # noqa: BLE001 - no usable backend: not on a TPU
        return None


def default_size() -> str:
    """`full` on attached TPU hardware, where the benchmark's shapes run for real; `smoke` on a CPU."""
    return "full" if attached_tpu() else "smoke"


def session_setup(ctx: InvocationContext, task: str) -> dict:
    """State for a new run: the task, size, chip and the session's workspace folder. On a TPU the chip is the
    attached one and the default size is full."""
    s = get_settings()
    text = request_text(ctx)
    size = (_SIZE.search(text).group(1) if _SIZE.search(text) else None) or ctx.session.state.get("size") \
        or default_size()
    ws = s.data_dir / "workspaces" / ctx.session.id
    ws.mkdir(parents=True, exist_ok=True)
    chip = ctx.session.state.get("chip") or attached_tpu() or s.chip
    return {"task": task, "size": size, "chip": chip, "workspace": str(ws)}


def say(ctx: InvocationContext, author: str, text: str, delta: dict | None = None) -> Event:
    """An event from the orchestrator: a progress message and/or a state change."""
    return Event(author=author, invocation_id=ctx.invocation_id, branch=ctx.branch,
                 content=types.Content(role="model", parts=[types.Part(text=text)]) if text else None,
                 actions=EventActions(state_delta=delta or {}))


async def save_text_artifact(ctx: InvocationContext, name: str, text: str) -> int | None:
    """Save `text` as a versioned artifact of the session (None when no artifact service is configured)."""
    if ctx.artifact_service is None:
        return None
    return await ctx.artifact_service.save_artifact(app_name=ctx.session.app_name, user_id=ctx.session.user_id,
                                                    session_id=ctx.session.id, filename=name,
                                                    artifact=types.Part.from_text(text=text))
