"""The explainer: answers a person's questions in the human-in-the-loop mode."""

from google.adk import Agent

from maxkernel.agents.sub_agents.explainer import prompt
from maxkernel.tools import lookup, workspace

NAME = "explainer"


def build(model, **kw) -> Agent:
    return Agent(name=NAME, model=model, description="Answers questions about the kernel, plan, verdicts and profiles.",
                 instruction=prompt.instruction,
                 tools=[workspace.read_file, workspace.list_files, lookup.task_info, lookup.chip_specs,
                        lookup.pallas_api], **kw)
