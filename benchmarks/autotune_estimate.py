"""The autotuner off a TPU on the shipped 8p_GEMM kernel: does ranking by the TPU estimate pick a tiling near the best
of its search space?

    python3 benchmarks/autotune_estimate.py [--task 8p_GEMM] [--chip v5e] [--interpreter] [--json OUT]

Runs `autotune` with estimates on (every configuration that compiles at full size is estimated, then the fastest
estimates are correctness-gated at smoke size), prints the pick, the best estimate in the space and their ratio,
how many configurations were pruned / estimated, and the wall time. --interpreter also runs the old ranking (CPU
interpreter time at smoke size) and prints the estimate of what it would have picked. Every time is an estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="8p_GEMM")
    ap.add_argument("--chip", default="v5e")
    ap.add_argument("--interpreter", action="store_true", help="also rank by interpreter time, as before")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args()
    os.environ.setdefault("MAXKERNEL_CACHE_DIR", tempfile.mkdtemp(prefix="maxkernel-autotune-bench-"))
    os.environ["MAXKERNEL_ESTIMATE"] = "true"
    from maxkernel.harness.estimate.estimator import estimate_program
    from maxkernel.settings import get_settings
    from maxkernel.tools.autotune import autotune

    kernel = str(ROOT / "jaxbench" / args.task / "kernel.py")
    t0 = time.monotonic()
    r = autotune(args.task, kernel, chip=args.chip, max_configs=4, time_budget_s=7200)
    wall = time.monotonic() - t0
    est = sorted((t for t in r.tried if t.estimated_ms is not None), key=lambda t: t.estimated_ms)
    counts = {k: sum(t.outcome == k for t in r.tried) for k in ("pruned", "estimated", "best", "incorrect", "failed")}
    out = {"task": args.task, "chip": args.chip, "ok": r.ok, "summary": r.summary, "wall_s": round(wall, 1),
           "counts": counts, "best": r.best, "space_best": est[0].model_dump() if est else None,
           "ratio_to_space_best": (r.best["estimated_ms"] / est[0].estimated_ms) if r.ok and est else None,
           "top5": [(t.config, round(t.estimated_ms, 3), t.bound) for t in est[:5]],
           "worst5": [(t.config, round(t.estimated_ms, 3), t.bound) for t in est[-5:]]}
    print(f"{args.task} on {args.chip}: {r.summary}")
    print(f"space: {len(r.tried)} configurations, {counts}; wall {wall:.0f} s")
    if out["ratio_to_space_best"]:
        print(f"pick {r.best['config']} at {r.best['estimated_ms']:.3f} ms (estimated); best estimate in the space "
              f"{est[0].config} at {est[0].estimated_ms:.3f} ms: ratio {out['ratio_to_space_best']:.3f}")
    for cfg, ms, bound in out["top5"]:
        print(f"  top   {cfg}  {ms} ms  {bound}")
    for cfg, ms, bound in out["worst5"]:
        print(f"  worst {cfg}  {ms} ms  {bound}")
    if args.interpreter:
        os.environ["MAXKERNEL_ESTIMATE"] = "false"
        get_settings.cache_clear()
        t0 = time.monotonic()
        old = autotune(args.task, kernel, chip=args.chip, max_configs=16)
        pick = old.best["config"] if old.ok else None
        pick_est = next((t.estimated_ms for t in est if t.config == pick), None)
        if pick is not None and pick_est is None:
            from maxkernel import chips
            from maxkernel.tasks import load_task

            e = estimate_program(load_task(args.task), kernel, chips.get(args.chip), "full", pick)
            pick_est = e.estimated_ms
        out["interpreter_pick"] = {"config": pick, "estimated_ms": pick_est, "wall_s": round(time.monotonic() - t0, 1),
                                   "ratio_to_space_best": pick_est / est[0].estimated_ms if pick_est and est else None}
        print(f"ranked by interpreter time instead: {pick}, estimated {pick_est} ms "
              f"({out['interpreter_pick']['ratio_to_space_best']} x the space's best)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
