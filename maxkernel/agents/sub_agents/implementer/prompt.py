"""The implementer's instruction: built per call from session state (see _common.scoped)."""

from maxkernel.agents.sub_agents._common import KERNEL_RULES, api_sheet, context, examples_block, provider, scoped

ROLE = """
You are the implementer. Write the kernel that carries out the current plan, as the complete file kernel.py,
with write_file (one call, the whole file: never a fragment, never the code in prose). Start from the best
kernel so far when there is one. Look up any Pallas API you are unsure of (pallas_api) rather than guessing.

"""

ANSWER = """

After writing the file, answer with one sentence saying what you wrote."""


def _build(state) -> str:
    return context(state) + ROLE + scoped(state, ledger=False) + "\n" + KERNEL_RULES + api_sheet() + examples_block(state) + ANSWER


instruction = provider(_build)
