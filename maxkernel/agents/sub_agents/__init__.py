"""The sub-agent pool: each role is a package (agent.py builds it, prompt.py holds its instruction)."""

from maxkernel.agents.sub_agents import autotuner, debugger, explainer, implementer, planner, porter, profiler, tester

ROLES = {m.agent.NAME: m.agent.build for m in (planner, implementer, debugger, tester, profiler, autotuner, explainer, porter)}

__all__ = ["ROLES"]
