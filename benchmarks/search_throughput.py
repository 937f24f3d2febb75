"""Search throughput: evaluated candidates per minute with 1, 2 and 4 workers, replay model, smoke size.

Each worker count runs a fresh `parallel` search whose nodes all sit in one generation, with the verdict memo
scoped per node (dedupe off) so every candidate really goes through the cascade. A candidate is one kernel
source judged (the replay's broken first kernel and the debugger's fix are two). Time runs from the start
to the last finished node (the held-out re-check of the answer is excluded). References are computed first.

Run: python benchmarks/search_throughput.py [--task 12p_RMSNorm] [--workers 1 2 4] [--nodes 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="12p_RMSNorm", choices=["12p_RMSNorm", "8p_GEMM"])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--nodes", type=int, default=2, help="nodes per run (at least the worker count)")
    ap.add_argument("--eval-workers", type=int, default=None, help="device limit (default: the worker count; "
                                                                   "on CPU the 'device' is the CPU)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mk-search-bench-"))
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    os.environ["MAXKERNEL_MODEL"] = "replay"
    os.environ["MAXKERNEL_DATA_DIR"] = str(root / "data")
    os.environ.setdefault("MAXKERNEL_CACHE_DIR", str(root / "cache"))

    from maxkernel.harness.verdict.evaluate import shared_evaluator
    from maxkernel.search import Graph, make_config, run_search
    from maxkernel.tasks import load_task

    probe = make_config(args.task)
    task = load_task(args.task)
    shared_evaluator().task_meta(task, probe.size)  # warms the pool and the task's metadata

    rows = []
    for w in args.workers:
        n = max(w, args.nodes)
        config = make_config(args.task, algorithm="parallel", parallel={"runs": n, "depth": 1}, profile=False,
                             dedupe=False, limits={"max_nodes": n, "workers": w, "model_workers": w,
                                                   "eval_workers": args.eval_workers or w})
        finished: list[float] = []
        out = root / f"w{w}"
        t0 = time.monotonic()
        run_search(out, config, progress=lambda e: e["event"] == "node_finished" and finished.append(time.monotonic()))
        span = (max(finished) if finished else time.monotonic()) - t0
        g = Graph(out)
        con = g._con()
        candidates = con.execute("SELECT COUNT(DISTINCT scope || sha) FROM evals WHERE stage = 'compile'").fetchone()[0]
        stages = con.execute("SELECT COUNT(*) FROM evals WHERE stage != 'heldout'").fetchone()[0]
        correct = g.totals()["correct"]
        rows.append({"workers": w, "nodes": n, "correct_nodes": correct, "candidates": candidates,
                     "stage_runs": stages, "seconds": round(span, 1),
                     "candidates_per_min": round(60 * candidates / span, 2), "nodes_per_min": round(60 * n / span, 2)})
    if args.json:
        print(json.dumps({"task": args.task, "model": "replay", "size": "smoke", "rows": rows}, indent=2))
    else:
        print(f"search throughput on {args.task} (smoke, replay model, {os.cpu_count()} CPUs)")
        print(f"{'workers':>7} {'nodes':>5} {'cands':>5} {'stages':>6} {'seconds':>8} {'cand/min':>9} {'nodes/min':>9}")
        for r in rows:
            print(f"{r['workers']:>7} {r['nodes']:>5} {r['candidates']:>5} {r['stage_runs']:>6} {r['seconds']:>8} "
                  f"{r['candidates_per_min']:>9} {r['nodes_per_min']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
