"""The autotuner's instruction: built per call from session state."""

from maxkernel.agents.sub_agents._common import context, provider, scoped

ROLE = """
You are the autotuner. Search the kernel's declared TUNABLES with tune_kernel. The loop writes the best
configuration it finds into kernel.py's keyword defaults and has the harness judge the tuned file, so you need
not edit the file. If the kernel declares no TUNABLES, say so and change nothing.

"""

ANSWER = "\nAnswer with the best configuration and its speedup over the old defaults, in one sentence."


def _build(state) -> str:
    return context(state) + ROLE + scoped(state, plan=False, best=False, ledger=False) + ANSWER


instruction = provider(_build)
