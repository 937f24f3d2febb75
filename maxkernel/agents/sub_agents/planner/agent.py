"""The planner: tiling, memory spaces, pipelining and grid, from the chip table and profile feedback."""

from google.adk import Agent

from maxkernel.agents.sub_agents.planner import prompt
from maxkernel.tools import lookup, workspace

NAME = "planner"


def build(model, **kw) -> Agent:
    return Agent(name=NAME, model=model, description="Plans the next kernel version: grid, blocks, memory, tunables.",
                 instruction=prompt.instruction, output_key="plan",
                 tools=[lookup.task_info, lookup.chip_specs, lookup.pallas_api, lookup.read_example,
                        workspace.read_file, workspace.list_files], **kw)
