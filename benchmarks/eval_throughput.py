"""Harness speed: evaluations per minute on smoke tasks, and the harness's overhead over the kernel's own run.

Run: python benchmarks/eval_throughput.py [--evals 20] [--parallel 1] [--pool 2] [--json]
Overhead = an evaluation's wall time minus the candidate's own compile and runs and the baseline's timed runs
(what the harness adds: sandbox hand-offs, the judge's references, calibration and census of the TPU lowering,
the candidate's second trace and TPU lowering, output hashing, comparison). Since verdict v2 every evaluation
draws fresh seeds, so references are computed every time (two sandboxed jobs per verdict); before it they were
cached after the first evaluation of a task. benchmarks/results/verdict_v2_overhead_*.json keep both. Since the
persistent judge (harness/verdict/judge_service.py) the judge's job runs on a long-lived judge; MAXKERNEL_PERSISTENT_JUDGE=false
starts a fresh one per verdict as before (benchmarks/results/persistent_judge_back_to_back.json keeps both).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = [("12p_RMSNorm", ROOT / "tests/harness/kernels/rmsnorm_rows.py"),
           ("8p_GEMM", ROOT / "tests/harness/kernels/gemm_tiled.py")]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--evals", type=int, default=20)
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--pool", type=int, default=None,
                    help="pre-started candidate workers (an evaluation takes one, two without a persistent judge); "
                         "default: as the product sizes it (MAXKERNEL_POOL_SIZE, one more once jobs come back to back)")
    ap.add_argument("--idle", type=float, default=0.0,
                    help="seconds between evaluations (as an agent's think time): the pool's replacement workers "
                         "start in it, so each verdict is timed on a warm pool")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from maxkernel.harness.verdict.evaluate import Evaluator
    from maxkernel.harness.sandbox.pool import WorkerPool

    with Evaluator(WorkerPool(size=args.pool)) as ev:
        t0 = time.monotonic()
        warm = [ev.evaluate(task, kernel) for task, kernel in KERNELS]  # fills the reference cache
        warm_s = time.monotonic() - t0
        time.sleep(3)  # let the pool's replacement workers finish starting
        jobs = [KERNELS[i % len(KERNELS)] for i in range(args.evals)]
        t0 = time.monotonic()
        with ThreadPoolExecutor(args.parallel) as pool:
            def one(tk):
                v = ev.evaluate(*tk)
                time.sleep(args.idle)
                return v

            verdicts = list(pool.map(one, jobs))
        wall = time.monotonic() - t0
        judges = ev.judges.started if ev.judges is not None else None
        pool_size = ev.pool.size
    statuses = sorted({v.status for v in verdicts + warm})
    over = [v.overhead_s for v in verdicts if v.overhead_s is not None]
    own = [v.wall_s - v.overhead_s for v in verdicts if v.overhead_s is not None]
    report = {
        "evals": len(verdicts), "parallel": args.parallel, "pool": args.pool if args.pool is not None else
        f"settings ({pool_size} at the end)", "statuses": statuses,
        "persistent_judge": ev.judges is not None, "judges_started": judges,
        "idle_s": args.idle,
        "evals_per_minute": round(60 * len(verdicts) / (wall - args.idle * len(verdicts) / args.parallel), 2),
        "first_round_s_with_references": round(warm_s, 2),
        "overhead_s": {"median": round(statistics.median(over), 3), "max": round(max(over), 3)},
        "kernel_own_s": {"median": round(statistics.median(own), 3)},
        "eval_wall_s": {"median": round(statistics.median(v.wall_s for v in verdicts), 3)},
        # The median over both tasks falls between them: each task's own, so neither hides behind the other.
        "eval_wall_s_by_task": {t: round(statistics.median(v.wall_s for v in verdicts if v.task == t), 3)
                                for t in sorted({v.task for v in verdicts})},
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for k, v in report.items():
            print(f"{k:>32}: {v}")
    return 0 if statuses == ["correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
