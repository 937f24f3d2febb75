"""The implementer's instruction."""

from maxkernel.agentlib.sub_agents._common import CONTEXT, KERNEL_RULES

INSTRUCTION = CONTEXT + """
You are the implementer. Write the kernel that carries out the approved plan, as the complete file kernel.py,
with write_file. Look up any Pallas API you are unsure of (pallas_api) rather than guessing.

Plan:
{plan?}

""" + KERNEL_RULES + """

After writing the file, answer with one sentence saying what you wrote."""
