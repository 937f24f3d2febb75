"""The small-blocks check: one more run of the kernel at the checked size with its smallest declared tunables.

A kernel's default blocks are sized for the full problem, so at the sizes the interpreter can afford (smoke, and the
drawn check size) a reduction or carry axis often takes one grid step: a flash-attention kernel that forgets to
rescale its running sum, or a scan that drops its carry between blocks, is then right there and wrong at full size.
The kernel's own TUNABLES say which smaller blocks are valid, so the verdict also runs the first input set with
them (the smallest values, else the next ones up) when that takes more grid steps than the defaults and fits the
interpreter's budget (16 times the defaults' steps, 1024 in all), and compares it with the same reference. A
declared configuration that does not fit the checked size (the kernel refuses it while tracing) is skipped, and
said; one that runs and is wrong makes the verdict incorrect. This catches honest multi-step bugs; a hostile kernel
could avoid it by declaring nothing, as it could any check it can see coming.
"""

from __future__ import annotations

__all__ = ["MAX_STEPS", "MAX_FACTOR", "budget", "candidates", "grid_steps", "describe"]

MAX_STEPS = 1024  # grid steps over every pallas_call of the program: a few interpreter seconds for the suite
MAX_FACTOR = 16  # and at most this many times the defaults' steps (smaller blocks make each step cheaper)


def budget(default_steps: int) -> int:
    """The most grid steps the small-blocks run may take, given the defaults' steps at the checked size."""
    return min(MAX_STEPS, MAX_FACTOR * max(default_steps, 1))


def candidates(source: str, tunables: dict | None) -> list[dict]:
    """Configurations to try, smallest first: level i takes each numeric tunable's i-th smallest value (its
    largest when it has fewer); only those that differ from what the verdict runs. [] without TUNABLES."""
    from maxkernel.pysource import declared_tunables

    try:
        space, defaults = declared_tunables(source)
    except (SyntaxError, ValueError, TypeError, AttributeError):
        return []
    current = {**defaults, **(tunables or {})}
    numeric = {k: sorted(set(v)) for k, v in space.items()
               if v and all(isinstance(x, int) and not isinstance(x, bool) for x in v)}
    out = []
    for level in range(max((len(v) for v in numeric.values()), default=0)):
        config = {k: v[min(level, len(v) - 1)] for k, v in numeric.items()}
        if any(current.get(k) != x for k, x in config.items()) and config not in out:
            out.append(config)
    return out


def grid_steps(closed_jaxpr) -> int:
    """Grid steps over every pallas_call of a traced program (1 per call without a grid)."""
    import math

    from maxkernel.harness.hints.vmem_footprint import walk_eqns

    total = 0
    for eqn in walk_eqns(closed_jaxpr.jaxpr):
        if eqn.primitive.name == "pallas_call":
            grid = tuple(getattr(eqn.params["grid_mapping"], "grid", ()) or ())
            total += math.prod(g for g in grid if isinstance(g, int)) if grid else 1
    return total


def describe(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(config.items()))
