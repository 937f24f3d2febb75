"""Loops priced per trip: the suite baselines with loops, estimated on v5e and v6e, beside the body priced once.

    python3 benchmarks/loop_pricing.py [--chip v5e --chip v6e] [--task T ...] [--out benchmarks/results/loop_pricing]

For each XLA baseline whose workload loops (lax.map, scan, fori_loop, while_loop), `estimate` without a kernel:
the estimate, its static profile with loop bodies priced once per trip, the same profile with each body priced once
(what the estimator reported before loops were priced: the fit's `cycles_once` at the largest profiled size, scaled
the same way), the trip counts read, whether the profile is still under-priced and why, and the earlier figure in
benchmarks/results/estimate_table_cpu.json where it has one. Writes OUT.json and OUT.md; every figure is an
estimate from libtpu's static profile, not a measured TPU time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LOOPING = ("1p_Flash_Attention", "2p_GQA_Attention", "3p_MLA_Attention", "4p_Sparse_Attention", "5p_Flex_Attention",
           "7p_Ragged_Paged_Attention", "rw_dit_attention", "rw_fused_linear_cross_entropy", "rw_gated_deltanet_chunk",
           "rw_lightning_indexer", "rw_mhc_stream_mixing", "rw_rglru_scan", "rw_rl_logprob_entropy",
           "rw_topk_sparse_attention_sink")


def _spec(name: str) -> str:
    return str(ROOT / "jaxbench" / "realworld" / name) if name.startswith("rw_") else name


def _earlier() -> dict:
    path = ROOT / "benchmarks" / "results" / "estimate_table_cpu.json"
    rows = json.loads(path.read_text()) if path.is_file() else []
    return {(r["case"].split(" ")[0], r["chip"]): r.get("estimated_ms") for r in rows
            if r["case"].endswith("XLA baseline")}


def row(name: str, chip: str, earlier: dict) -> dict:
    from maxkernel.harness.estimate.estimator import estimate

    t0 = time.monotonic()
    e = estimate(_spec(name), None, chip, "full")
    out = {"task": name, "chip": chip, "ok": e.ok, "wall_s": round(time.monotonic() - t0, 1), "cached": e.cached,
           "earlier_ms": earlier.get((name, chip))}
    if not e.ok:
        return out | {"error": e.error, "stage": e.stage}
    last = e.fit["points"][-1]
    trips = sorted({t for p in e.fit["points"] for t in p.get("loop_trips", []) if t is not None})
    unknown = any(t is None for p in e.fit["points"] for t in p.get("loop_trips", []))
    once = last.get("cycles_once")
    share = (once / last["cycles"]) if once is not None and last["cycles"] else None
    return out | {"estimated_ms": e.estimated_ms, "static_ms": e.static_cycles_ms,
                  "static_once_ms": e.static_cycles_ms * share if share is not None else None,
                  "roofline_ms": e.roofline_ms, "compute_floor_ms": e.floors["compute_ms"],
                  "memory_floor_ms": e.floors["memory_ms"], "bound": e.bound, "trips": trips,
                  "unknown_trip_count": unknown, "under_priced": e.under_priced, "how": e.fit.get("how")}


def _ms(v) -> str:
    return f"{v:.3g}" if isinstance(v, (int, float)) else "—"


def markdown(rows: list[dict]) -> str:
    lines = ["# Loops priced per trip: suite baselines with loops (TPU estimates, not measured)", "",
             "`benchmarks/loop_pricing.py`. static = the fitted static profile at full size with each loop body "
             "priced once per trip; once = the same profile with each body priced once (as before); earlier = "
             "`estimate_table_cpu.json`'s figure (the old method, floored). Under-priced: the static profile is "
             "below the task's FLOP floor (or, filled, under half its HBM floor), with why.", "",
             "| task | chip | estimate ms | static ms | once ms | earlier ms | floor ms (compute / memory) | trips | "
             "under-priced |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["ok"]:
            lines.append(f"| {r['task']} | {r['chip']} | could not estimate ({r.get('stage')}): "
                         f"{str(r.get('error'))[:140]} | | | {_ms(r['earlier_ms'])} | | | |")
            continue
        under = "yes: " + r["under_priced"].split(". Likely cause")[0][:160] if r["under_priced"] else "no"
        trips = ", ".join(map(str, r["trips"])) + (" and an unknown count" if r["unknown_trip_count"] else "")
        lines.append(f"| {r['task']} | {r['chip']} | {_ms(r['estimated_ms'])} | {_ms(r['static_ms'])} | "
                     f"{_ms(r['static_once_ms'])} | {_ms(r['earlier_ms'])} | {_ms(r['compute_floor_ms'])} / "
                     f"{_ms(r['memory_floor_ms'])} | {trips or 'no loop left'} | {under} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chip", action="append")
    ap.add_argument("--task", action="append")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "loop_pricing"))
    args = ap.parse_args()
    out = Path(args.out)
    done = {}
    if out.with_suffix(".json").is_file():  # resumable: rows already made are kept unless asked for again
        done = {(r["task"], r["chip"]): r for r in json.loads(out.with_suffix(".json").read_text())}
    earlier = _earlier()
    for name in args.task or LOOPING:
        for chip in args.chip or ["v5e", "v6e"]:
            r = row(name, chip, earlier)
            done[(name, chip)] = r
            print(json.dumps({k: v for k, v in r.items() if k != "under_priced"}), flush=True)
            rows = [done[k] for k in sorted(done, key=lambda k: (LOOPING.index(k[0]) if k[0] in LOOPING else 99, k[1]))]
            out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
            out.with_suffix(".md").write_text(markdown(rows))


if __name__ == "__main__":
    main()
