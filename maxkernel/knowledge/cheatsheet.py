"""The compact Pallas cheat sheet in the implementer's and debugger's instructions: the names a TPU kernel
uses, with the installed signatures, and the older spellings that are gone. Generated from the API table, so
it is stamped with the jax version and holds only names that exist in it."""

from __future__ import annotations

import functools
import re

from maxkernel.knowledge.api import IMPORTS, api_table, jax_version

__all__ = ["cheat_sheet", "SHEET_NAMES"]

# What a TPU kernel reaches for, in the order a kernel uses it; a name missing from the installed jax is left
# out of the sheet (and named by the test that checks the sheet against the package).
SHEET_NAMES = {
    "pl": ("pallas_call", "BlockSpec", "GridSpec", "program_id", "num_programs", "when", "ds", "cdiv",
           "multiple_of", "Buffered", "ANY", "run_scoped", "semaphore_wait", "semaphore_signal", "CostEstimate"),
    "pltpu": ("CompilerParams", "PrefetchScalarGridSpec", "VMEM", "SMEM", "HBM", "SemaphoreType",
              "make_async_copy", "sync_copy", "emit_pipeline", "PARALLEL", "ARBITRARY", "roll", "bitcast",
              "repeat", "get_tpu_info"),
}
_SIG_CHARS = 150


def _short_sig(sig: str) -> str:
    sig = re.sub(r"'([^']*)'", r"\1", sig)  # string annotations read as plain types
    return sig if len(sig) <= _SIG_CHARS else sig[:_SIG_CHARS - 4] + " ...)"


@functools.lru_cache(maxsize=1)
def cheat_sheet() -> str:
    """The sheet for the installed jax (cached per process; the table under it per jax version)."""
    table = api_table()
    lines = [f"Pallas API of the installed jax {jax_version()} (generated from the package; use these spellings, "
             "look up anything else with pallas_api):",
             f"  {IMPORTS['pl']}; {IMPORTS['pltpu']}"]
    for alias, names in SHEET_NAMES.items():
        have = table["modules"].get(alias, {})
        for n in names:
            entry = have.get(n)
            if entry is None:
                continue
            if entry["kind"] == "enum":
                lines.append(f"  {alias}.{n}: {entry['doc'].removeprefix('members: ')}")
            elif entry["kind"] in ("function", "class") and entry["signature"]:
                lines.append(f"  {alias}.{n}{_short_sig(entry['signature'])}")
            else:
                lines.append(f"  {alias}.{n}")
    gone = [r for r in table["renames"] if r.get("status", "removed") == "removed"]
    old = [r for r in table["renames"] if r.get("status") == "deprecated"]
    if gone:
        lines.append(f"Not in jax {jax_version()} (older spellings): "
                     + "; ".join(f"{r['old']} -> {r['new']}" for r in gone) + ".")
    if old:
        lines.append(f"Deprecated in jax {jax_version()}: " + "; ".join(f"{r['old']} -> {r['new']}" for r in old) + ".")
    return "\n".join(lines)
