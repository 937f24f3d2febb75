"""One node of a graph search built through an ADK Runner by the `search` root policy
(agents/roots/search_node.py: plan -> implement -> check/debug -> judge -> profile)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from maxkernel.search.workers import SEARCH_KEY, lookup

__all__ = ["NodeJob", "Produced", "build_node"]

USER = "search"


@dataclass(frozen=True)
class NodeJob:
    node_id: int
    depth: int
    strategy_text: str
    parent_source: str | None
    parent_summary: str
    workspace: Path
    memo_scope: str
    profile: bool = True  # ask the profiler for advice (pointless for the search's last generation)


@dataclass
class Produced:
    source: str | None
    advice: str | None
    tokens: int
    cost_usd: float
    llm_calls: int
    note: str


def build_node(job: NodeJob, search_key: str, config, progress: Callable[[str], None] | None = None) -> Produced:
    """Run the search policy for one node on a fresh event loop (call from a worker thread)."""
    return asyncio.run(_build(job, search_key, config, progress or (lambda _l: None)))


async def _build(job: NodeJob, search_key: str, config, progress) -> Produced:
    from google.adk import Runner
    from google.adk.apps import App
    from google.adk.artifacts import InMemoryArtifactService
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from maxkernel.agents.app import build_root
    from maxkernel.agents.guard import ToolGuardPlugin
    from maxkernel.agents.usage import UsagePlugin
    from maxkernel.search.workers import LimitsPlugin

    shutil.rmtree(job.workspace, ignore_errors=True)  # a node re-run after a crash starts clean
    job.workspace.mkdir(parents=True)
    if job.parent_source is not None:
        (job.workspace / "parent_kernel.py").write_text(job.parent_source)
    limits = LimitsPlugin()
    app = App(name="search", root_agent=build_root("search", config.model), plugins=[UsagePlugin(), ToolGuardPlugin(), limits])
    sessions = InMemorySessionService()
    runner = Runner(app=app, session_service=sessions, artifact_service=InMemoryArtifactService())
    state = {"task": config.task, "size": config.size, "chip": config.chip, "workspace": str(job.workspace),
             "iteration": job.depth, "debug_round": 0, "advice": job.strategy_text, "best_summary": job.parent_summary,
             SEARCH_KEY: search_key, "memo_scope": job.memo_scope, "node_id": job.node_id,
             "profile": config.profile and job.profile, "max_debug_rounds": config.limits.max_debug_rounds,
             # The sub-agents' scoped context: the parent node's kernel is the best they start from.
             "best_kernel": {"source": job.parent_source, "summary": f"the parent node: {job.parent_summary}"}
             if job.parent_source else None,
             "ledger": [f"parent node: {job.parent_summary}"] if job.parent_summary else []}
    notes: list[str] = []
    try:
        session = await sessions.create_session(app_name=app.name, user_id=USER, state=state)
        message = types.Content(role="user", parts=[types.Part(text=f"build node {job.node_id}")])
        async for event in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
            for part in (event.content.parts if event.content else None) or []:
                if part.text and part.text.strip():
                    line = f"{event.author}: {part.text.strip().splitlines()[0][:160]}"
                    notes.append(line)
                    progress(line)
        session = await sessions.get_session(app_name=app.name, user_id=USER, session_id=session.id)
    finally:
        limits.release_all(lookup(search_key))
        await runner.close()
    s = session.state
    usage = s.get("usage") or {}
    kernel = job.workspace / "kernel.py"
    return Produced(source=kernel.read_text() if kernel.is_file() else None,
                    advice=(s.get("advice") or None) if s.get("profiled") else None,
                    tokens=int(usage.get("tokens", 0)), cost_usd=float(usage.get("cost_usd", 0.0)),
                    llm_calls=int(usage.get("llm_calls", 0)), note="\n".join(notes[-12:]))
