"""The tester: runs the fixed correctness tests and reports."""

from google.adk import Agent

from maxkernel.agents.sub_agents.tester import prompt
from maxkernel.tools import session_tools, workspace

NAME = "tester"


def build(model, **kw) -> Agent:
    return Agent(name=NAME, model=model, description="Runs the fixed correctness tests on kernel.py and reports.",
                 instruction=prompt.instruction, output_key="test_report",
                 tools=[session_tools.test_kernel, workspace.read_file], **kw)
