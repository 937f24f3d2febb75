"""The field's summary numbers over per-task records: fast_p, speedup statistics, failures, cost per kernel."""

from __future__ import annotations

import math
import statistics

import numpy as np

from maxkernel.evals.judging import FAILURES

__all__ = ["FAST_P", "fast_key", "summarize", "is_fast"]

FAST_P = (0.0, 1.0, 1.5, 2.0)


def fast_key(p: float) -> str:
    """fast_0, fast_1, fast_1.5, fast_2: the names cli.md uses."""
    return f"fast_{p:g}"


def _rank_key(record: dict) -> str:
    """The speedup a record is ranked by: rank_speedup (the estimated TPU speedup off a TPU) where the record
    has one, else the measured speedup (records written before estimates existed)."""
    return "rank_speedup" if record.get("rank_speedup") is not None else "speedup"


def is_fast(record: dict, p: float, key: str | None = None) -> bool:
    """Correct and faster than the XLA baseline by more than p (fast_0: correct), by the record's rank speedup."""
    s = record.get(key or _rank_key(record))
    return bool(record.get("correct")) and s is not None and s > p


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _total(records: list[dict], key: str) -> float | None:
    """Sum of a cost field; None when any record's value is unknown (an unpriced model), never a silent zero."""
    values = [r.get(key) for r in records]
    return None if any(v is None for v in values) else sum(values)


def _per(total: float | None, n: int) -> float | None:
    return None if total is None or n == 0 else total / n


def _speedups(records: list[dict], key: str = "speedup") -> list[float]:
    return [r[key] for r in records if r.get("correct") and r.get(key) is not None]


def _ranked(records: list[dict]) -> list[float]:
    return [r[_rank_key(r)] for r in records if r.get("correct") and r.get(_rank_key(r)) is not None]


def _group(records: list[dict]) -> dict:
    n = len(records)
    out = {"tasks": n, "correct": sum(1 for r in records if r.get("correct"))}
    for p in FAST_P:
        out[fast_key(p)] = sum(is_fast(r, p) for r in records) / n if n else None
    labels = sorted({r.get("rank_label") or "measured" for r in records if r.get("correct")})
    out["speedup_source"] = "; ".join(labels) if labels else None
    if any(r.get("rank_speedup") is not None and r.get("rank_speedup") != r.get("speedup") for r in records):
        measured = _speedups(records)  # the interpreter's figures, kept beside the estimates as a sanity check
        out["measured"] = {**{fast_key(p): sum(is_fast(r, p, "speedup") for r in records) / n for p in FAST_P},
                           "geomean_speedup": _geomean(measured), "label": "measured on this machine's backend"}
    speedups = _ranked(records)
    out["geomean_speedup"] = _geomean(speedups)
    out["median_speedup"] = statistics.median(speedups) if speedups else None
    if speedups:
        q1, q3 = np.percentile(speedups, [25, 75])
        out.update(speedup_q1=float(q1), speedup_q3=float(q3), speedup_min=min(speedups), speedup_max=max(speedups))
    else:
        out.update(speedup_q1=None, speedup_q3=None, speedup_min=None, speedup_max=None)
    vs_ref = _speedups(records, "speedup_vs_reference")
    out["geomean_speedup_vs_reference"] = _geomean(vs_ref)
    out["with_reference"] = len(vs_ref)
    roof = _speedups(records, "roofline_fraction")
    out["median_roofline_fraction"] = statistics.median(roof) if roof else None
    return out


def _suite(record: dict) -> str:
    """The record's suite (older records carry only the tier: rw is the real-world suite)."""
    return record.get("suite") or ("realworld" if record.get("tier") == "rw" else "jaxbench")


def summarize(records: list[dict]) -> dict:
    """Everything a report or `bench agent --json` states about a set of task records."""
    out = _group(records)
    tiers = sorted({r.get("tier") or "" for r in records} - {""})
    out["by_tier"] = {t: _group([r for r in records if r.get("tier") == t]) for t in tiers}
    suites = sorted({_suite(r) for r in records}, key=lambda s: (s != "jaxbench", s))
    out["by_suite"] = {s: _group([r for r in records if _suite(r) == s]) for s in suites}
    failures = {f: 0 for f in FAILURES}
    for r in records:
        if r.get("failure"):
            failures[r["failure"]] = failures.get(r["failure"], 0) + 1
    out["failures"] = failures
    fast = sum(is_fast(r, 1.0) for r in records)
    for key in ("llm_calls", "tokens", "cost_usd", "wall_s"):
        total = _total(records, key)
        out[key] = total
        out[f"{key}_per_task"] = _per(total, len(records))
        out[f"{key}_per_fast_kernel"] = _per(total, fast)  # per correct-and-faster (fast_1) kernel
    out["fast_kernels"] = fast
    out["backends"] = sorted({r.get("backend") for r in records if r.get("backend")})
    out["cpu_timing"] = any(r.get("backend") == "cpu" or "cpu_timing" in (r.get("flags") or []) for r in records)
    return out
