"""Where a record's speedups come from (measured on a TPU, a TPU estimate, the CPU interpreter), read off the record."""

from __future__ import annotations

__all__ = ["ESTIMATE", "CPU", "UNRECORDED", "NA_SOURCES", "label", "ordered", "best", "measured_source",
           "source_of_label", "rank_source", "ranked", "vs_reference"]

ESTIMATE = "tpu_estimate"
CPU = "cpu_interpreter"
UNRECORDED = "unrecorded"  # a record written before backends were recorded
_LABELS = {ESTIMATE: "TPU estimate", CPU: "CPU interpreter, not TPU time", UNRECORDED: "source not recorded"}
NA_SOURCES = "n/a (sources differ)"


def label(source: str | None) -> str:
    """What a column or axis says its speedups are: "TPU estimate", "TPU measured", "CPU interpreter, ..."."""
    if source is None:
        return "no ranked speedup"
    return _LABELS.get(source) or f"{source.removesuffix('_measured').upper()} measured"


def _order(source: str) -> tuple:
    # Measured on hardware beats an estimate of it, which beats interpreter wall times; TPU before other chips.
    if source.endswith("_measured"):
        return (0, source != "tpu_measured", source)
    return ({ESTIMATE: 1, CPU: 2}.get(source, 3), False, source)


def ordered(sources) -> list[str | None]:
    """The distinct `sources`, best-ranked first (measured > TPU estimate > CPU interpreter), None (not ranked) last."""
    present = set(sources)
    return sorted(present - {None}, key=_order) + ([None] if None in present else [])


def best(sources) -> str | None:
    """The best-ranked of `sources`; None when there are none."""
    present = [s for s in ordered(sources) if s is not None]
    return present[0] if present else None


def measured_source(record: dict) -> str:
    """Source of record["speedup"] and of the reference speedup beside it: the harness timed both on the record's
    backend, so both carry the backend's source."""
    backend = record.get("backend") or ""
    if backend == "cpu" or "cpu_timing" in (record.get("flags") or []):
        return CPU
    return f"{backend}_measured" if backend else UNRECORDED


def source_of_label(rank_label: str, record: dict) -> str | None:
    """Source of a speedup ranked under `rank_label` (the label harness.verdict.rank_speedup wrote); None when the
    label says not ranked. A record without a label (older records) was ranked by its measured speedup."""
    if rank_label.startswith("estimated TPU speedup"):
        return ESTIMATE
    if rank_label.startswith("not ranked"):
        return None
    if rank_label.startswith("CPU interpreter"):
        return CPU
    if rank_label.startswith("measured on "):
        backend = rank_label.removeprefix("measured on ").strip()
        return CPU if backend == "cpu" else f"{backend}_measured"
    return measured_source(record)


def rank_source(record: dict) -> str | None:
    """Source of the speedup the record is ranked by."""
    return source_of_label(record.get("rank_label") or "", record)


def ranked(record: dict) -> tuple[float | None, str | None]:
    """(speedup, source) the record is ranked by: rank_speedup where recorded, else (older records) the measured
    speedup; (None, None) for a kernel the harness declined to rank."""
    source = rank_source(record)
    if source is None:
        return None, None
    value = record.get("rank_speedup")
    if value is None and source != ESTIMATE:
        value = record.get("speedup")
    return value, source


def vs_reference(record: dict) -> tuple[float | None, str | None, str]:
    """(the agent's ranked speedup over the reference kernel's, its source, why it is missing): both sides must
    come from one source, or the ratio is "n/a (sources differ)". Records without the reference's rank carry only
    its measured speedup, the source of that record's `speedup`."""
    mine, source = ranked(record)
    if "reference_rank_label" in record:
        ref = record.get("reference_rank_speedup")
        ref_source = source_of_label(record.get("reference_rank_label") or "", record)
        if ref_source is None and mine is not None:
            return None, source, "n/a (reference kernel not ranked)"
    else:
        ref, ref_source = record.get("reference_speedup"), measured_source(record)
    if mine is None or ref is None:
        return None, source, ""  # no reference kernel, or no figure to compare
    if ref_source != source:
        return None, source, NA_SOURCES
    return mine / ref, source, ""
