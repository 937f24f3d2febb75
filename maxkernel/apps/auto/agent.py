"""The autonomous app: `adk run maxkernel/apps/auto "optimize 12p_RMSNorm"`."""

from maxkernel.agents import build_app

app = build_app("auto")
root_agent = app.root_agent  # for AgentEvaluator, which loads root_agent
