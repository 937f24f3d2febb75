"""The `search` root policy: builds ONE node of a graph search over the shared sub-agent pool, with every gate
(compile, strict test, verdict) answered by the running search's cascade, found through the registry below."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event

from maxkernel.agents.roots._common import one_line, say
from maxkernel.agents.usage import FAULTS_KEY

__all__ = ["NodeBuilder", "SEARCH_KEY", "register", "lookup", "unregister"]

SEARCH_KEY = "search_key"  # session state: which running search's cascade and limits a node belongs to

# Live searches by key: a search registers its context (cascade, limits, config) and puts the key in state.
_CONTEXTS: dict[str, Any] = {}


def register(ctx: Any) -> str:
    key = uuid.uuid4().hex
    _CONTEXTS[key] = ctx
    return key


def lookup(key: str | None) -> Any | None:
    return _CONTEXTS.get(key or "")


def unregister(key: str) -> None:
    _CONTEXTS.pop(key, None)


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
        yield say(ctx, self.name, f"Node {state.get('node_id')}: {one_line(state.get('advice'))}",
                  {"debug_round": 0})
        for role in ("planner", "implementer"):
            async for ev in self._step(ctx, agents[role]):
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
                yield say(ctx, self.name, f"Giving up after {round_} debug rounds: {one_line(problem, 300)}",
                          {"debug_round": 0})
                break
            yield say(ctx, self.name, f"Debug round {round_ + 1}: {one_line(problem, 300)}",
                      {"last_error": problem, "debug_round": round_ + 1})
            async for ev in self._step(ctx, agents["debugger"]):
                yield ev
        if not ok:
            return
        verdict = await asyncio.to_thread(search.cascade.evaluate, kernel.read_text(), state.get("memo_scope", ""))
        yield say(ctx, self.name, f"Node {state.get('node_id')}: {verdict.summary}",
                  {"verdict_summary": verdict.summary})
        if verdict.correct and state.get("profile"):
            yield say(ctx, self.name, "", {"advice": ""})  # the profiler's answer replaces the strategy text
            failed: list = []
            async for ev in self._step(ctx, agents["profiler"], failed):
                yield ev
            if not failed:
                yield say(ctx, self.name, "", {"profiled": True})

    async def _step(self, ctx: InvocationContext, agent, failed: list | None = None):
        """A sub-agent's events; if it raises (a model that gave up after its retries, anything else) the node
        records the fault and goes on without that step, so a correct kernel is never lost to a later step."""
        try:
            async for ev in agent.run_async(ctx):
                yield ev
        except Exception as exc:  # noqa: BLE001 - one step's failure is not the node's
            if failed is not None:
                failed.append(exc)
            state = ctx.session.state
            faults = list(state.get(FAULTS_KEY) or []) + [
                {"kind": "step_failed", "role": agent.name, "iteration": state.get("iteration"),
                 "message": one_line(str(exc), 200), "handled": "the node went on without this step"}]
            yield say(ctx, self.name, f"{agent.name} step failed: {one_line(str(exc), 300)}; the node goes on "
                                      "without it", {FAULTS_KEY: faults})
