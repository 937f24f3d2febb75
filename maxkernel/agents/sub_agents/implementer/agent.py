"""The implementer: writes the kernel file from the plan."""

from google.adk import Agent

from maxkernel.agents.sub_agents.implementer import prompt
from maxkernel.tools import lookup, workspace

NAME = "implementer"


def build(model, **kw) -> Agent:
    return Agent(name=NAME, model=model, description="Writes kernel.py in the workspace from the plan.",
                 instruction=prompt.instruction, output_key="implementation_note",
                 tools=[lookup.task_info, lookup.pallas_api, lookup.read_example, workspace.read_file,
                        workspace.write_file, workspace.list_files], **kw)
