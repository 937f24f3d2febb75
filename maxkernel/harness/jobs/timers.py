"""The timer functions as they were when a sandboxed child started, before any candidate code ran (imported first
by harness/jobs/worker.py); jobs time with these and check afterwards that nobody replaced the live ones."""

from __future__ import annotations

import time
import types

__all__ = ["TIMERS", "replaced_timers"]

TIMERS = {"perf_counter": time.perf_counter, "perf_counter_ns": time.perf_counter_ns,
          "monotonic": time.monotonic, "monotonic_ns": time.monotonic_ns, "time": time.time}


def replaced_timers() -> list[str]:
    """Names of timer functions that are no longer the C built-ins taken at start."""
    return [name for name, fn in TIMERS.items()
            if getattr(time, name) is not fn or not isinstance(fn, types.BuiltinFunctionType)]
