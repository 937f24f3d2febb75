"""The profiler: captures a profile, reads the roofline, says what to try next."""

from google.adk import Agent

from maxkernel.agents.sub_agents.profiler import prompt
from maxkernel.tools import lookup, session_tools, workspace

NAME = "profiler"


def build(model, **kw) -> Agent:
    return Agent(name=NAME, model=model, description="Profiles kernel.py and advises what to change next.",
                 instruction=prompt.instruction, output_key="advice",
                 tools=[session_tools.profile_kernel, session_tools.estimate_kernel, lookup.chip_specs,
                        workspace.read_file], **kw)
