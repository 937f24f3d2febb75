"""The human-in-the-loop app: `adk web maxkernel/apps`, then pick "hitl"."""

from maxkernel.agents import build_app
from maxkernel.agents.sub_agents import ROLES
from maxkernel.apps._setup import app_or_setup

app = app_or_setup("hitl", [*ROLES, "root"], lambda: build_app("hitl"))
root_agent = app.root_agent  # for AgentEvaluator, which loads root_agent
