"""One verdict for a task with several named configs (prefill and decode, several head counts): the kernel is judged
on each config's inputs; it is correct only if it is correct on every one, and its speedup is the geomean."""

from __future__ import annotations

import math

from maxkernel.harness.verdict.result import Verdict

__all__ = ["combine", "geomean"]


def geomean(values: list[float]) -> float | None:
    """The geometric mean of positive values; None when any is missing or not positive."""
    if not values or any(v is None or not v > 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _row(size: str, v: Verdict) -> dict:
    est, c = v.estimate or {}, v.correctness
    return {"size": size, "status": v.status, "reason": v.reason, "speedup": v.speedup,
            "max_rel_err": c.max_rel_err, "tolerance": c.tolerance, "max_fro_err": c.max_fro_err,
            "fro_tolerance": c.fro_tolerance, "speedup_estimate": est.get("speedup_estimate"),
            "kernel_ms": v.kernel.median_ms if v.kernel else None,
            "baseline_ms": v.baseline.median_ms if v.baseline else None, "small_blocks": c.small_blocks}


def _closeness(v: Verdict) -> float:
    """How near a verdict's errors come to their bounds (the larger of error/tolerance, Frobenius error/bound);
    the bare error where no bound is known."""
    c = v.correctness
    ratios = [err / tol for err, tol in ((c.max_rel_err, c.tolerance), (c.max_fro_err, c.fro_tolerance))
              if err is not None and tol]
    return max(ratios) if ratios else (c.max_rel_err or 0.0)


def combine(size: str, verdicts: dict[str, tuple[str, Verdict]]) -> Verdict:
    """`verdicts`: config name -> (the size that ran it, its verdict), in the task's order. The first failing
    config's verdict stands for the whole (its reason names the config); when all are correct the first config's
    verdict carries the geomean speedup (and estimate) and the correctness of the worst config (the one whose errors
    come nearest their bounds: its error, Frobenius error, tolerances and per-seed rows, together), with every
    config's own figures in `configs`."""
    rows = {name: _row(sz, v) for name, (sz, v) in verdicts.items()}
    failing = [(name, v) for name, (_, v) in verdicts.items() if v.status != "correct"]
    wall = sum(v.wall_s for _, v in verdicts.values())
    # A flag one config raised (a suspicious timing, CPU timing) stands for the whole verdict.
    flags = list(dict.fromkeys(f for _, v in verdicts.values() for f in v.flags))
    if failing:
        name, base = failing[0]
        also = [n for n, _ in failing[1:]]
        reason = f"[config {name}] {base.reason}" + (f" (also fails: {', '.join(also)})" if also else "")
        return base.model_copy(update={"size": size, "reason": reason, "configs": rows, "wall_s": wall,
                                       "speedup": None, "flags": flags})
    first = next(iter(verdicts.values()))[1]
    worst = max((v for _, v in verdicts.values()), key=_closeness)  # the first of equals: max keeps the first
    # Each config's program as it was checked, so an estimate at one config is tied to that config's program.
    prints = {name: (v.integrity or {}).get("fingerprints") or {} for name, (_, v) in verdicts.items()}
    update = {"size": size, "configs": rows, "wall_s": wall, "flags": flags,
              "integrity": {**(first.integrity or {}), "fingerprints_by_config": prints},
              "speedup": geomean([v.speedup for _, v in verdicts.values()]), "correctness": worst.correctness}
    estimates = [v.estimate for _, v in verdicts.values()]
    if all(e and e.get("speedup_estimate") for e in estimates):
        speedups = [e["speedup_estimate"] for e in estimates]
        update["estimate"] = {**estimates[0], "speedup_estimate": geomean(speedups),
                              "summary": f"estimated TPU speedup, geomean over {len(speedups)} configs: "
                                         + ", ".join(f"{n} {s:.2f}x" for n, s in zip(verdicts, speedups))}
    return first.model_copy(update=update)
