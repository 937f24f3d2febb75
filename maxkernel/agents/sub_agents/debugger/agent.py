"""The debugger: fixes the kernel from compiler and test output."""

from google.adk import Agent

from maxkernel.agents.sub_agents.debugger import prompt
from maxkernel.tools import lookup, session_tools, workspace

NAME = "debugger"


def build(model, **kw) -> Agent:
    return Agent(name=NAME, model=model, description="Fixes kernel.py from compile or test failures.",
                 instruction=prompt.instruction, output_key="debug_note",
                 tools=[workspace.read_file, workspace.write_file, session_tools.compile_kernel,
                        session_tools.test_kernel, lookup.pallas_api, lookup.chip_specs], **kw)
