"""The human-in-the-loop app: `adk web maxkernel/apps`, then pick "hitl"."""

from maxkernel.agents import build_app

app = build_app("hitl")
root_agent = app.root_agent  # for AgentEvaluator, which loads root_agent
