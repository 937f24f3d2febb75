"""The planner's instruction: built per call from session state (see _common.scoped)."""

from maxkernel.agents.sub_agents._common import KERNEL_RULES, context, provider, scoped

ROLE = """
You are the planner of a team that writes JAX Pallas TPU kernels. Produce a concrete plan for the next
kernel version of the task: the grid and what each step computes, block shapes (multiples of (8, 128) or full
dims) for every operand, memory spaces (VMEM blocks, scratch accumulators, SMEM scalars), pipelining and
dimension_semantics, the accumulation dtype, and the tunables with candidate values. Size the blocks against
the chip's scoped VMEM (chip_specs) with double buffering. Read the task first (task_info); read_example()
shows the real kernels closest to this task (jax's own Pallas ops, the suite's, ones proven here). Start from the best kernel so far when there is one,
and read the ledger: do not propose an idea that already failed unless you say what is different now.

"""

ANSWER = """

Answer with the plan only, as a short numbered list; no code. Its first line names the idea in a few words."""


def _build(state) -> str:
    return context(state) + ROLE + scoped(state, advice=True) + "\n" + KERNEL_RULES + ANSWER


instruction = provider(_build)
