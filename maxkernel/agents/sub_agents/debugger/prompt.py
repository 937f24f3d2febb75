"""The debugger's instruction: the failure (mapped to kernel lines), the plan, and its own earlier attempts."""

from maxkernel.agents.sub_agents._common import KERNEL_RULES, api_sheet, context, provider, scoped

ROLE = """
You are the debugger. The kernel in the workspace failed a check. Read it, find the cause from the tool
output below, fix it with write_file (the whole file), and confirm the fix with compile_kernel and/or
test_kernel before you answer. Never change the task's inputs or tolerances; fix the kernel. Do not repeat a
fix that your earlier rounds already tried.

"""

ANSWER = """

Answer with one or two sentences: the cause, and what you changed."""


def _history(state) -> str:
    rounds = list(state.get("debug_history") or [])
    if not rounds:
        return "Your earlier attempts at this kernel: none.\n"
    return "Your earlier attempts at this kernel:\n" + "\n".join(
        f"- round {r.get('round')}: error {r.get('error_class')}; you said: {r.get('note') or '(nothing)'}"
        for r in rounds[-6:]) + "\n"


def _build(state) -> str:
    failed = state.get("last_error") or "(no failure recorded)"
    return (context(state) + ROLE + f"What failed:\n{failed}\n\n" + _history(state) + "\n"
            + scoped(state, best=False, ledger=False) + "\n" + KERNEL_RULES + api_sheet() + ANSWER)


instruction = provider(_build)
