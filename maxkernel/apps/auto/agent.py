"""The autonomous app: `adk run maxkernel/apps/auto "optimize 12p_RMSNorm"`."""

from maxkernel.agents import build_app
from maxkernel.agents.sub_agents import ROLES
from maxkernel.apps._setup import app_or_setup

app = app_or_setup("auto", ROLES, lambda: build_app("auto"))
root_agent = app.root_agent  # for AgentEvaluator, which loads root_agent
