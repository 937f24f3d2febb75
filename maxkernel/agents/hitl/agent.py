"""The human-in-the-loop app: `adk web maxkernel/agents`, then pick "hitl"."""

from maxkernel.agentlib import build_app

app = build_app("hitl")
root_agent = app.root_agent  # for AgentEvaluator, which loads root_agent
