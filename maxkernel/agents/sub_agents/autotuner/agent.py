"""The autotuner: searches the kernel's tunables and keeps the best as its defaults."""

from google.adk import Agent

from maxkernel.agents.sub_agents.autotuner import prompt
from maxkernel.tools import session_tools, workspace

NAME = "autotuner"


def build(model, **kw) -> Agent:
    return Agent(name=NAME, model=model, description="Tunes kernel.py's TUNABLES and writes the best as defaults.",
                 instruction=prompt.instruction, output_key="tuning_note",
                 tools=[session_tools.tune_kernel, workspace.read_file, workspace.write_file], **kw)
