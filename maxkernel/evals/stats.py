"""The field's summary numbers over per-task records: fast_p, speedup statistics, failures, cost per kernel."""

from __future__ import annotations

import math
import statistics

import numpy as np

from maxkernel.evals import sources
from maxkernel.evals.judging import FAILURES

__all__ = ["FAST_P", "fast_key", "summarize", "is_fast"]

FAST_P = (0.0, 1.0, 1.5, 2.0)


def fast_key(p: float) -> str:
    """fast_0, fast_1, fast_1.5, fast_2: the names cli.md uses."""
    return f"fast_{p:g}"


def is_fast(record: dict, p: float, key: str | None = None) -> bool:
    """Correct and faster than the XLA baseline by more than p (fast_0: correct), by the record's ranked speedup
    (sources.ranked) or, given `key`, by that field."""
    s = record.get(key) if key else sources.ranked(record)[0]
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


def _figures(rows: list[dict], source: str | None) -> dict:
    """fast_p, speedup statistics and vs-reference over `rows`, every one of whose correct kernels is ranked by a
    speedup of `source`; each figure names its source and the tasks it covers."""
    n = len(rows)
    out = {"source": source, "source_label": sources.label(source), "rows": [r.get("task") for r in rows]}
    for p in FAST_P:
        out[fast_key(p)] = sum(is_fast(r, p) for r in rows) / n if n else None
    ranked = [(r.get("task"), sources.ranked(r)[0]) for r in rows if r.get("correct")]
    ranked = [(t, v) for t, v in ranked if v is not None]
    speedups = [v for _, v in ranked]
    out["geomean_speedup"] = _geomean(speedups)
    out["median_speedup"] = statistics.median(speedups) if speedups else None
    if speedups:
        q1, q3 = np.percentile(speedups, [25, 75])
        out.update(speedup_q1=float(q1), speedup_q3=float(q3), speedup_min=min(speedups), speedup_max=max(speedups))
    else:
        out.update(speedup_q1=None, speedup_q3=None, speedup_min=None, speedup_max=None)
    vs_ref, na = [], {}
    for r in rows:
        if r.get("correct"):
            value, _, why = sources.vs_reference(r)
            if value is not None:
                vs_ref.append((r.get("task"), value))
            elif why:
                na[r.get("task")] = why
    out["geomean_speedup_vs_reference"] = _geomean([v for _, v in vs_ref])
    out["with_reference"] = len(vs_ref)
    out["vs_reference_na"] = na
    out["figures"] = {
        "fast_p": {"source": source, "rows": out["rows"]},
        "geomean_speedup": {"source": source, "rows": [t for t, _ in ranked]},
        "geomean_speedup_vs_reference": {"source": source, "rows": [t for t, _ in vs_ref]}}
    return out


def _group(records: list[dict], headline: str | None) -> dict:
    """One group's figures by the `headline` source. Correct kernels ranked by another source are summarised
    apart (under "apart", one entry per source), never folded in; failed tasks count against the headline."""
    n = len(records)
    out = {"tasks": n, "correct": sum(1 for r in records if r.get("correct"))}
    by_source: dict = {}
    for r in records:
        if r.get("correct"):
            by_source.setdefault(sources.rank_source(r), []).append(r)
    rows = [r for r in records if not r.get("correct") or sources.rank_source(r) == headline]
    out.update(_figures(rows, headline))
    labels = sorted({r.get("rank_label") or "measured" for r in by_source.get(headline, [])})
    out["speedup_source"] = "; ".join(labels) if labels else None  # as recorded, e.g. the estimate's chip
    out["apart"] = [_figures(by_source[s], s) for s in sources.ordered(by_source) if s != headline]
    if any(r.get("rank_speedup") is not None and r.get("rank_speedup") != r.get("speedup") for r in records):
        # The harness's own timings, kept beside the estimates as a sanity check: over one measured source only.
        timed = sources.best(sources.measured_source(r) for r in records if r.get("correct"))
        mine = [r for r in records if not r.get("correct") or sources.measured_source(r) == timed]
        m = len(mine)
        out["measured"] = {**{fast_key(p): sum(is_fast(r, p, "speedup") for r in mine) / m for p in FAST_P},
                           "geomean_speedup": _geomean(_speedups(mine)), "source": timed,
                           "label": sources.label(timed), "rows": [r.get("task") for r in mine]}
    roof = _speedups(records, "roofline_fraction")
    out["median_roofline_fraction"] = statistics.median(roof) if roof else None
    return out


def _suite(record: dict) -> str:
    """The record's suite (older records carry only the tier: rw is the real-world suite)."""
    return record.get("suite") or ("realworld" if record.get("tier") == "rw" else "jaxbench")


def summarize(records: list[dict]) -> dict:
    """Everything a report or `bench agent --json` states about a set of task records.

    Every figure combines speedups of one source: the best-ranked source among the correct kernels (measured >
    TPU estimate > CPU interpreter) for the headline, the same in every tier and suite; the rest go apart."""
    headline = sources.best(sources.rank_source(r) for r in records if r.get("correct"))
    out = _group(records, headline)
    tiers = sorted({r.get("tier") or "" for r in records} - {""})
    out["by_tier"] = {t: _group([r for r in records if r.get("tier") == t], headline) for t in tiers}
    suites = sorted({_suite(r) for r in records}, key=lambda s: (s != "jaxbench", s))
    out["by_suite"] = {s: _group([r for r in records if _suite(r) == s], headline) for s in suites}
    failures = {f: 0 for f in FAILURES}
    for r in records:
        if r.get("failure"):
            failures[r["failure"]] = failures.get(r["failure"], 0) + 1
    out["failures"] = failures
    fast = sum(is_fast(r, 1.0) for r in records if sources.rank_source(r) == headline)  # by the headline's source
    for key in ("llm_calls", "tokens", "cost_usd", "wall_s"):
        total = _total(records, key)
        out[key] = total
        out[f"{key}_per_task"] = _per(total, len(records))
        out[f"{key}_per_fast_kernel"] = _per(total, fast)  # per correct-and-faster (fast_1) kernel
    out["fast_kernels"] = fast
    out["backends"] = sorted({r.get("backend") for r in records if r.get("backend")})
    out["cpu_timing"] = any(r.get("backend") == "cpu" or "cpu_timing" in (r.get("flags") or []) for r in records)
    return out
