"""The `search` policy: a root that builds ONE node of a graph search over the shared sub-agent pool
(plan -> implement -> check/debug -> judge -> profile), and the function that runs it through an ADK Runner."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from pathlib import Path

from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event

from maxkernel.agentlib.root._common import say
from maxkernel.search.workers import SEARCH_KEY, lookup

__all__ = ["NodeBuilder", "NodeJob", "Produced", "build_node"]

USER = "search"


class NodeBuilder(BaseAgent):
    """Routes deterministically: the creative steps are sub-agents, every gate is the search's cascade."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        state = ctx.session.state
        search = lookup(state.get(SEARCH_KEY))
        if search is None or not state.get("workspace"):
            yield say(ctx, self.name, "This root builds one node of a graph search; start one with "
                                      "`maxkernel search --task TASK`, and steer it from the search app.")
            return
        agents = {a.name: a for a in self.sub_agents}
        kernel = Path(state["workspace"]) / "kernel.py"
        yield say(ctx, self.name, f"Node {state.get('node_id')}: {state.get('advice', '').splitlines()[0][:200]}",
                  {"debug_round": 0})
        for role in ("planner", "implementer"):
            async for ev in agents[role].run_async(ctx):
                yield ev
        ok = False
        for round_ in range(int(state.get("max_debug_rounds", 2)) + 1):
            if not kernel.is_file():
                problem = "kernel.py was not written: write the whole kernel file with write_file."
            else:
                check = await asyncio.to_thread(search.cascade.check, kernel.read_text(), state.get("memo_scope", ""))
                if check.ok:
                    yield say(ctx, self.name, check.feedback[:500], {"debug_round": 0, "last_error": ""})
                    ok = True
                    break
                problem = check.feedback
            if round_ == int(state.get("max_debug_rounds", 2)):
                yield say(ctx, self.name, f"Giving up after {round_} debug rounds: {problem.splitlines()[0][:300]}",
                          {"debug_round": 0})
                break
            yield say(ctx, self.name, f"Debug round {round_ + 1}: {problem.splitlines()[0][:300]}",
                      {"last_error": problem, "debug_round": round_ + 1})
            async for ev in agents["debugger"].run_async(ctx):
                yield ev
        if not ok:
            return
        verdict = await asyncio.to_thread(search.cascade.evaluate, kernel.read_text(), state.get("memo_scope", ""))
        yield say(ctx, self.name, f"Node {state.get('node_id')}: {verdict.summary}",
                  {"verdict_summary": verdict.summary})
        if verdict.correct and state.get("profile"):
            yield say(ctx, self.name, "", {"advice": ""})  # the profiler's answer replaces the strategy text
            async for ev in agents["profiler"].run_async(ctx):
                yield ev
            yield say(ctx, self.name, "", {"profiled": True})


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

    from maxkernel.agentlib.app import build_root
    from maxkernel.agentlib.usage import UsagePlugin
    from maxkernel.search.workers import LimitsPlugin

    shutil.rmtree(job.workspace, ignore_errors=True)  # a node re-run after a crash starts clean
    job.workspace.mkdir(parents=True)
    if job.parent_source is not None:
        (job.workspace / "parent_kernel.py").write_text(job.parent_source)
    limits = LimitsPlugin()
    app = App(name="search", root_agent=build_root("search", config.model), plugins=[UsagePlugin(), limits])
    sessions = InMemorySessionService()
    runner = Runner(app=app, session_service=sessions, artifact_service=InMemoryArtifactService())
    state = {"task": config.task, "size": config.size, "chip": config.chip, "workspace": str(job.workspace),
             "iteration": job.depth, "debug_round": 0, "advice": job.strategy_text, "best_summary": job.parent_summary,
             SEARCH_KEY: search_key, "memo_scope": job.memo_scope, "node_id": job.node_id,
             "profile": config.profile and job.profile, "max_debug_rounds": config.limits.max_debug_rounds}
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
