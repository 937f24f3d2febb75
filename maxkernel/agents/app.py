"""One factory for every paradigm: the same sub-agent pool under a root chosen by policy."""

from __future__ import annotations

import logging

from google.adk.apps import App

from maxkernel.agents.guard import ToolGuardPlugin
from maxkernel.agents.models import resolve_model
from maxkernel.agents.sub_agents import ROLES
from maxkernel.agents.usage import UsagePlugin

__all__ = ["POLICIES", "build_pool", "build_root", "build_app"]

POLICIES = ("auto", "hitl", "search", "port")


class _NoAppNameHeuristic(logging.Filter):
    """ADK guesses an app name from the folder a root agent's class was loaded from ("roots", under agents/) and
    warns on every run that it differs from ours; our apps are named by policy on purpose, so the line is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("App name mismatch")


def _quiet_adk() -> None:
    runners = logging.getLogger("google_adk.google.adk.runners")
    if not any(isinstance(f, _NoAppNameHeuristic) for f in runners.filters):
        runners.addFilter(_NoAppNameHeuristic())


def build_pool(model: str | None = None, *, single_turn: bool = False) -> list:
    """A fresh instance of every sub-agent (an ADK agent has one parent, so each root gets its own)."""
    # Outside HITL each sub-agent sees its scoped instruction and its own current turn, not the transcript.
    kw = {"mode": "single_turn"} if single_turn else {"include_contents": "none"}
    return [build(resolve_model(role, override=model), **kw) for role, build in ROLES.items()]


def build_root(policy: str, model: str | None = None):
    """The root orchestrator for `policy` over a fresh sub-agent pool."""
    if policy == "auto":
        from maxkernel.agents.roots.auto import AutoOrchestrator

        return AutoOrchestrator(name="maxkernel_auto", description="Autonomous kernel optimisation loop.",
                                sub_agents=build_pool(model))
    if policy == "hitl":
        from maxkernel.agents.roots.hitl import build_hitl_root

        return build_hitl_root(build_pool(model, single_turn=True), resolve_model("root", override=model))
    if policy == "search":
        from maxkernel.agents.roots.search_node import NodeBuilder

        return NodeBuilder(name="maxkernel_search", description="Builds one node of a graph search: plan, implement, "
                           "check and debug, judge, profile.", sub_agents=build_pool(model))
    if policy == "port":
        from maxkernel.agents.roots.port import PortOrchestrator

        return PortOrchestrator(name="maxkernel_port", description="Ports a GPU operator to a JAX reference the "
                                "harness proves equivalent.", sub_agents=build_pool(model))
    raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")


def build_app(policy: str, model: str | None = None, *, name: str | None = None) -> App:
    """An ADK App for `policy`, with the usage plugin (LLM calls, tokens, cost, retries) and the tool guard (a tool
    never raises into the runner)."""
    _quiet_adk()
    return App(name=name or policy, root_agent=build_root(policy, model), plugins=[UsagePlugin(), ToolGuardPlugin()])
