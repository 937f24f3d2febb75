"""The TPU estimate against measured TPU time: how wrong is it, per program, and does it rank programs right?

    On a TPU host (measures, then compares):
        python3 benchmarks/estimate_vs_device.py [--suite S | --task T ...] [--what baseline|kernel|both]
                                                 [--reps N] [--json OUT]
    Anywhere, against timings taken elsewhere (no TPU needed):
        python3 benchmarks/estimate_vs_device.py --measured TIMES.json [--json OUT]

TIMES.json is a list of {"task", "chip", "measured_ms", "program": "baseline" (default) or "kernel", optional
"kernel" (a kernel file; default the task's shipped kernel.py), optional "tunables"}. Each row gets the estimate for
its chip (libtpu's static profile on shrunk shapes, as off a TPU) beside the measured time, with what the estimate
said of itself (bound, under_priced, its uncertainty: extrapolation, fit residual, 0-cycle fill share, decided by
profile or floor). The summary per chip: median and worst |estimate / measured - 1|, the share within 1.5x and 2x,
and Spearman's rank correlation (the estimate ranks candidates off a TPU: its order matters more than its scale);
then the same errors split by what the estimate said of itself, to check that its stated uncertainty means
something. Without a TPU and without --measured it says so and exits 2: there is nothing to measure against.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Known-cost cases beside the suite: the GEMM tilings of tpu-estimate.md and two RMSNorm row blocks.
TILINGS = [
    ("8p_GEMM", {"block_m": 128, "block_n": 128, "block_k": 128}),
    ("8p_GEMM", {"block_m": 256, "block_n": 256, "block_k": 256}),
    ("8p_GEMM", {"block_m": 512, "block_n": 1024, "block_k": 1024}),
    ("12p_RMSNorm", {"block_rows": 8}),
    ("12p_RMSNorm", {"block_rows": 128}),
]


def suite_rows(suite: str, tasks: list[str] | None, what: str, chip: str) -> list[dict]:
    """The rows to measure on a TPU: each task's baseline and/or shipped kernel, then the known tilings."""
    import jaxbench

    names = tasks or jaxbench.task_names(suite)
    rows = []
    for name in names:
        folder = jaxbench.task_dir(name)
        if what in ("baseline", "both"):
            rows.append({"task": name, "chip": chip, "program": "baseline"})
        if what in ("kernel", "both") and (folder / "kernel.py").is_file():
            rows.append({"task": name, "chip": chip, "program": "kernel"})
    if what in ("kernel", "both") and not tasks:
        rows += [{"task": t, "chip": chip, "program": "kernel", "tunables": tun} for t, tun in TILINGS]
    return rows


def _kernel_path(row: dict) -> str:
    import jaxbench

    return str(Path(row["kernel"]) if row.get("kernel") else jaxbench.task_dir(row["task"]) / "kernel.py")


def estimated(row: dict) -> dict:
    """The estimate's side of one row: its figure and what it said of itself."""
    from maxkernel.harness.estimate.estimator import estimate

    kernel = _kernel_path(row) if row.get("program") == "kernel" else None
    est = estimate(row["task"], kernel, row["chip"], "full", row.get("tunables"))
    prog = est.kernel if kernel else est.baseline
    u = (prog.uncertainty if prog is not None else None) or {}
    return {"estimated_ms": est.estimated_ms if est.ok else None, "bound": est.bound,
            "under_priced": bool(est.under_priced), "decided_by": u.get("decided_by"),
            "extrapolation": u.get("extrapolation"), "fit_max_residual": u.get("fit_max_residual"),
            "zero_cycle_fill_share": u.get("zero_cycle_fill_share"), "loop_trips_share": u.get("loop_trips_share"),
            "estimate_error": None if est.ok else est.error}


def measured(row: dict, reps: int) -> float | None:
    """The harness's median device time of the row's program at full size (on the attached TPU)."""
    from maxkernel.harness.verdict.evaluate import evaluate

    if row.get("program") == "kernel":
        v = evaluate(row["task"], _kernel_path(row), size="full", reps=reps, tunables=row.get("tunables"),
                     estimate=False)
        return v.kernel.median_ms if v.status == "correct" and v.kernel else None
    return _time_baseline(row["task"], reps)


def _time_baseline(name: str, reps: int) -> float:
    """The task's own XLA baseline (trusted code), jitted at full size: the median of `reps` timed calls."""
    import time

    import jax

    from maxkernel.tasks import load_task

    task = load_task(name)
    inputs = task.create_inputs(size="full", seed=0)
    fn = jax.jit(task.module.workload)
    jax.block_until_ready(fn(*inputs))
    times = []
    for _ in range(max(reps, 3)):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*inputs))
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den if den else None


def errors(rows: list[dict]) -> dict:
    """Error figures over the rows that have both an estimate and a measurement."""
    both = [r for r in rows if r.get("estimated_ms") and r.get("measured_ms")]
    if not both:
        return {"n": 0}
    ratios = [r["estimated_ms"] / r["measured_ms"] for r in both]
    err = [abs(x - 1) for x in ratios]
    off = [max(x, 1 / x) for x in ratios]
    return {"n": len(both), "median_abs_error": statistics.median(err), "worst_abs_error": max(err),
            "within_1.5x": sum(o <= 1.5 for o in off) / len(off), "within_2x": sum(o <= 2 for o in off) / len(off),
            "median_ratio": statistics.median(ratios),
            "spearman": spearman([r["estimated_ms"] for r in both], [r["measured_ms"] for r in both])}


def summary(rows: list[dict]) -> dict:
    out = {}
    for chip in sorted({r["chip"] for r in rows}):
        mine = [r for r in rows if r["chip"] == chip]
        out[chip] = {"all": errors(mine),
                     "by_decided_by": {k: errors([r for r in mine if r.get("decided_by") == k])
                                       for k in sorted({str(r.get("decided_by")) for r in mine}) if k != "None"},
                     "under_priced": errors([r for r in mine if r.get("under_priced")]),
                     "extrapolated_over_16x": errors([r for r in mine if (r.get("extrapolation") or 1) > 16]),
                     "not_estimated": [r["task"] for r in mine if not r.get("estimated_ms")]}
    return out


def _line(r: dict) -> str:
    ratio = r["estimated_ms"] / r["measured_ms"] if r.get("estimated_ms") and r.get("measured_ms") else float("nan")
    return (f"{r['task']:<34} {r.get('program', 'baseline'):<8} {r['chip']:<4} "
            f"estimated {r.get('estimated_ms') or float('nan'):9.3f} ms  measured {r.get('measured_ms') or float('nan'):9.3f}"
            f" ms  ratio {ratio:5.2f}  {r.get('decided_by') or ''}{' under-priced' if r.get('under_priced') else ''}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", help="TIMES.json: timings taken elsewhere (no TPU needed here)")
    ap.add_argument("--suite", default="all", choices=("jaxbench", "realworld", "all"))
    ap.add_argument("--task", action="append")
    ap.add_argument("--what", default="both", choices=("baseline", "kernel", "both"))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", help="write the rows and the summary here")
    args = ap.parse_args()
    if args.measured:
        try:
            rows = json.loads(Path(args.measured).read_text())
            assert isinstance(rows, list) and all(isinstance(r, dict) and r.get("task") and r.get("chip")
                                                  and isinstance(r.get("measured_ms"), (int, float)) for r in rows)
        except (OSError, ValueError, AssertionError):
            print(f"estimate_vs_device: {args.measured} is not a list of {{task, chip, measured_ms}} rows",
                  file=sys.stderr)
            return 2
        on_tpu = False
    else:
        import jax

        if jax.default_backend() != "tpu":
            print(f"estimate_vs_device: no TPU attached (backend {jax.default_backend()}) and no --measured "
                  "timings: nothing to measure against; run this on a TPU VM or pass --measured TIMES.json",
                  file=sys.stderr)
            return 2
        from maxkernel import chips

        rows = suite_rows(args.suite, args.task, args.what, chips.detect().name)
        on_tpu = True
    for r in rows:
        if on_tpu:
            r["measured_ms"] = measured(r, args.reps)
        r.update(estimated(r))
        print(_line(r), flush=True)
    result = {"label": "TPU estimate (libtpu static profile + roofline floor) against measured TPU time",
              "rows": rows, "summary": summary(rows)}
    for chip, s in result["summary"].items():
        a = s["all"]
        if a["n"]:
            print(f"{chip}: median |estimate/measured - 1| {a['median_abs_error']:.1%}, worst {a['worst_abs_error']:.1%}, "
                  f"within 2x {a['within_2x']:.0%}, Spearman {a['spearman'] if a['spearman'] is None else round(a['spearman'], 3)}"
                  f" over {a['n']} programs")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
