"""The ADK app folders `adk web`/`adk run` load: each builds its root over the same sub-agent pool."""

import importlib

import pytest

from maxkernel.agents.sub_agents import ROLES

pytestmark = pytest.mark.unit


def _agents(root):
    return sorted(a.name for a in root.sub_agents)


def test_auto_and_hitl_apps_share_one_pool(replay_env):
    auto = importlib.reload(importlib.import_module("maxkernel.apps.auto.agent"))
    hitl = importlib.reload(importlib.import_module("maxkernel.apps.hitl.agent"))
    assert (auto.app.name, hitl.app.name) == ("auto", "hitl")
    assert auto.root_agent is auto.app.root_agent
    assert _agents(auto.app.root_agent) == _agents(hitl.app.root_agent) == sorted(ROLES)
    assert type(auto.app.root_agent).__name__ == "AutoOrchestrator"
