"""estimate_tpu_time: how long a kernel would take on a TPU, estimated on a CPU from libtpu's static profile."""

from __future__ import annotations

from maxkernel.harness.estimate.estimator import Estimate, estimate

__all__ = ["estimate_tpu_time"]


def estimate_tpu_time(task: str, kernel: str | None, chip: str = "v5e", size: str = "full",
                      tunables: dict | None = None) -> Estimate:
    """Estimates a Pallas kernel's run time on a TPU chip, and the task's XLA baseline's, without that chip.

    libtpu compiles the kernel deviceless at a few shrunk sizes (parallel dimensions cut, block sizes kept) and
    reports estimated cycles; these are fitted, extrapolated to the full size and floored by the roofline (the
    task's FLOPs at peak, the HBM bytes its BlockSpecs fetch at full bandwidth). The result is an ESTIMATE, not a
    measurement: use it to rank candidates and to see what limits a kernel (bound, fraction_of_roofline). A kernel
    that does not compile for the chip gets the compiler's error and hint instead of an estimate; one with no
    pallas_call is priced as XLA's program, as the baseline is, and says it is not a Pallas kernel; a task whose baseline.py fails is reported as the
    task's failure (stage task).

    Args:
        task: Suite task name (e.g. "8p_GEMM") or a task folder path.
        kernel: Path of the kernel file defining workload(*inputs); None estimates the task's XLA baseline alone.
        chip: v4, v5e (default), v5p, v6e or 7x.
        size: "full" (default: the benchmark's shapes) or "smoke".
        tunables: Keyword arguments for workload(), e.g. {"block_m": 512}.

    Returns:
        estimated_ms, baseline_estimated_ms, speedup_estimate, bound (compute | memory | overhead), the task's
        floors {compute_ms, memory_ms} and roofline_ms (the figure compile_pallas reports), own_floor_ms (the
        kernel's own floor, its BlockSpec re-reads included), fraction_of_roofline (roofline_ms / estimated_ms),
        the fit used, limits, and a one-line summary.
    """
    if tunables is not None and not isinstance(tunables, dict):  # a sloppy tool call: say what is accepted
        return Estimate(ok=False, chip=str(chip), size=str(size), stage="input",
                        error=f"tunables must be a mapping of keyword -> value, not {type(tunables).__name__}",
                        summary="Not estimated: tunables must be a mapping of keyword -> value")
    return estimate(str(task), str(kernel) if kernel is not None else None, str(chip), str(size), tunables)
