"""What every sub-agent's instruction is built from: a scoped context read from session state, not the
transcript. Each sub-agent runs with include_contents="none", so a model call sees this instruction and its own
current turn only: the prompt stays flat however many iterations a run has had."""

from __future__ import annotations

import functools
from typing import Callable

__all__ = ["KERNEL_RULES", "api_sheet", "examples_block", "context", "scoped", "provider", "LEDGER_LINES", "SOURCE_CHARS"]

LEDGER_LINES = 12  # the newest attempts shown line by line; older ones are counted
SOURCE_CHARS = 8000  # the best kernel's source is cut past this (a kernel file is ~1-4 KB)

KERNEL_RULES = """A kernel is the file kernel.py in the workspace. It defines workload(*inputs) taking exactly the task's
inputs and returning the task's outputs as one array or a flat tuple of arrays (same shapes and dtypes). The
heavy work (matmuls, reductions, the epilogue) must run inside pl.pallas_call, without an interpret= argument
(the harness interprets it on CPU); work left in XLA around a thin Pallas call is rejected. Declare tunables as
keyword-only parameters of workload() with defaults, and their candidate values in a module-level
TUNABLES = {"name": (values, ...)} mapping. The file must be self-contained and is checked before it is run:
import only jax (public modules), numpy, functools, math, dataclasses, typing, itertools, operator; no os, sys,
time, threading, file access, callbacks, getattr/eval, dunder attributes, or assignments to module attributes."""


def api_sheet() -> str:
    """The installed Pallas API's cheat sheet (maxkernel.knowledge), or nothing if it cannot be built here: an
    instruction provider must never raise."""
    try:
        from maxkernel.knowledge import cheat_sheet

        return "\n" + cheat_sheet() + "\n"
    except Exception:  # noqa: BLE001 - a broken jax install: the agent still gets its instruction
        return ""


EXAMPLE_CHARS = 1500  # per retrieved example in the implementer's instruction


@functools.lru_cache(maxsize=64)
def _examples(task: str) -> str:
    from maxkernel.knowledge.examples import excerpt
    from maxkernel.tools.lookup import examples_for

    found = examples_for(task, k=2)
    if not found:
        return ""
    parts = ["Closest real kernels (by what this task computes; read_example() gives longer excerpts):"]
    for m in found:
        parts.append(f"--- {m['path']} ({m['kind']})\n{excerpt(m['file'], EXAMPLE_CHARS)}")
    return "\n".join(parts) + "\n"


def examples_block(state) -> str:
    """The 1-2 real kernels closest to the session's task, as excerpts with their paths; "" if none (an
    instruction provider must never raise)."""
    task = _get(state, "task", "")
    if not task:
        return ""
    try:
        return "\n" + _examples(str(task))
    except Exception:  # noqa: BLE001
        return ""


def _get(state, key, default=None):
    try:
        value = state.get(key, default)
    except Exception:  # noqa: BLE001 - a state view without .get
        value = default
    return default if value is None else value


def context(state) -> str:
    """The session facts every instruction starts with (the replay models read the first lines)."""
    return (f"Task: {_get(state, 'task', '(none chosen yet)')}\nSize: {_get(state, 'size', 'smoke')}\n"
            f"Target chip: {_get(state, 'chip', 'v5e')}\nIteration: {_get(state, 'iteration', '')}\n"
            f"Debug round: {_get(state, 'debug_round', '')}\n")


def _ledger(state) -> str:
    lines = list(_get(state, "ledger", []))
    if not lines:
        return "Attempt ledger: no attempts yet.\n"
    older = lines[:-LEDGER_LINES]
    shown = lines[-LEDGER_LINES:]
    head = f"({len(older)} older attempts not shown)\n" if older else ""
    return ("Attempt ledger (one line per earlier attempt: idea -> outcome; never propose again what failed, "
            "build on what worked):\n" + head + "\n".join(f"- {line}" for line in shown) + "\n")


def _best(state) -> str:
    best = _get(state, "best_kernel", {})
    if not best or not best.get("source"):
        return "Best correct kernel so far: none yet.\n"
    source = best["source"]
    if len(source) > SOURCE_CHARS:
        source = source[:SOURCE_CHARS] + "\n# ... (cut)"
    return (f"Best correct kernel so far ({best.get('summary', 'judged correct by the harness')}):\n"
            f"```python\n{source}\n```\n")


def scoped(state, *, plan: bool = True, best: bool = True, ledger: bool = True, verdict: bool = True,
           advice: bool = False) -> str:
    """The context block: current plan, best kernel (source + verdict), the ledger, the last verdict."""
    parts = []
    if plan:
        parts.append(f"Current plan:\n{_get(state, 'plan', '') or '(none yet)'}\n")
    if best:
        parts.append(_best(state))
    if ledger:
        parts.append(_ledger(state))
    if verdict and _get(state, "verdict_summary", ""):
        parts.append(f"Last verdict: {_get(state, 'verdict_summary')}\n")
    if advice and _get(state, "advice", ""):
        parts.append(f"Profiler's advice: {_get(state, 'advice')}\n")
    reask = _get(state, "reask", "")
    if reask:
        parts.append(f"YOUR PREVIOUS ANSWER WAS NOT USABLE: {reask}\n")
    return "\n".join(parts)


def provider(build: Callable[[object], str]) -> Callable:
    """An ADK instruction provider from `build(state) -> str` (ADK does no {placeholder} filling on it, so a
    key that is not set yet can never raise)."""

    def instruction(ctx) -> str:
        return build(ctx.state)

    instruction.__name__ = getattr(build, "__name__", "instruction")
    return instruction
