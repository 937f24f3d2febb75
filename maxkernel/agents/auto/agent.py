"""The autonomous app: `adk run maxkernel/agents/auto "optimize 12p_RMSNorm"`."""

from maxkernel.agentlib import build_app

app = build_app("auto")
