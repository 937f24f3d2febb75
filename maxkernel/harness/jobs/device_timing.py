"""Device-side times of compiled functions, read from a profiler trace (TPU/GPU); CPU has no device plane.

Each run is wrapped in a host TraceAnnotation that ends after block_until_ready, so the device ops of run i
lie inside window i; a run's time is the sum of the device ops' own times of the function's module.
"""

from __future__ import annotations

from pathlib import Path

from maxkernel.harness.estimate import xplane as _xplane

__all__ = ["device_samples", "device_ms_per_run"]


def device_ms_per_run(planes: list, label: str, module: str) -> list[float]:
    """Per-run device milliseconds of `module` inside the host annotations called `label`."""
    windows = _xplane.annotation_windows(planes, label)
    events = [e for e in _xplane.op_events(planes) if e.plane.startswith(_xplane.DEVICE_PREFIX) and e.module == module]
    out = []
    for start, end in windows:
        total = sum(e.self_ns for e in events if start <= e.start_ns <= end)
        if total > 0:
            out.append(total / 1e6)
    return out


def device_samples(fns: dict, args, runs: int, trace_dir: Path) -> dict[str, list[float]]:
    """{name: per-run device ms} for each compiled function in `fns` (named jit_<name>), interleaved runs.

    Returns empty lists where the trace holds no device events for a function (e.g. on CPU).
    """
    import jax

    with jax.profiler.trace(str(trace_dir)):
        for _ in range(runs):
            for name, fn in fns.items():
                with jax.profiler.TraceAnnotation(f"maxkernel_{name}"):
                    jax.block_until_ready(fn(*args))
    traces = _xplane.find_traces(trace_dir)
    if not traces:
        return {name: [] for name in fns}
    planes = _xplane.load(traces[-1])
    return {name: device_ms_per_run(planes, f"maxkernel_{name}", f"jit_{name}") for name in fns}
