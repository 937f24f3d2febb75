"""The porter: writes a pure-JAX reference of a GPU operator (PyTorch, Triton, CUDA) that the harness then
checks against the original."""

from google.adk import Agent

from maxkernel.agents.sub_agents.porter import prompt
from maxkernel.tools import port_tools, workspace

NAME = "porter"


def build(model, **kw) -> Agent:
    return Agent(name=NAME, model=model, description="Ports a PyTorch/Triton/CUDA operator to a pure-JAX reference "
                 "(jax_port.py) and checks it against the original.",
                 instruction=prompt.instruction, output_key="port_note",
                 tools=[workspace.read_file, workspace.write_file, workspace.list_files, port_tools.check_port], **kw)
