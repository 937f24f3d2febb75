"""Re-judging an agent's kernel with the trusted harness on held-out seeds: correctness, speedups, roofline."""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Judgement", "FAILURES", "heldout_seeds", "judge_kernel", "failure_category", "speedup_spread",
           "find_kernel", "find_task_and_size"]

# How a task can fail, in the field's usual buckets, plus the two ways an agent can fail before any verdict.
FAILURES = ("compile", "runtime", "incorrect", "timeout", "rejected", "unverifiable", "no_kernel", "agent_error")
_COMPILE_STAGES = {"import", "trace", "compile", "lower"}
_BEST = (re.compile(r"Best kernel:\s*(.+?\.py) from iteration"), re.compile(r"Best kernel:\s*(\S+?\.py)\b"))
_SIZE = re.compile(r"\b(smoke|full)\b")


@dataclass(frozen=True)
class Judgement:
    """The harness's view of one kernel, with everything a record or a metric reports."""

    task: str
    size: str
    kernel: str | None
    status: str  # a verdict status (correct, incorrect, error, timeout, rejected) or "no_kernel"
    failure: str | None  # one of FAILURES, None when correct
    reason: str
    seeds: list[int] = field(default_factory=list)
    backend: str = ""
    chip: str = ""
    flags: list[str] = field(default_factory=list)
    uses_library_kernel: str = ""  # a packaged kernel the candidate calls: its speed is not the agent's work
    speedup: float | None = None  # XLA baseline time / kernel time, medians, same process
    speedup_low: float | None = None  # from the quartiles of both timings: the spread behind `speedup`
    speedup_high: float | None = None
    reference_speedup: float | None = None  # the shipped reference kernel's speedup on the same seeds
    speedup_vs_reference: float | None = None  # measured / measured: both timed on this backend
    # The reference kernel's rank speedup and label (verdict.rank_speedup), so that a "vs reference" by the
    # estimate compares two estimates, never an estimate with an interpreter time.
    reference_rank_speedup: float | None = None
    reference_rank_label: str = ""
    roofline_fraction: float | None = None  # the chip's roofline bound / the kernel's median time
    # What results are ranked and summarised by (verdict.rank_speedup): off a TPU the estimated TPU speedup where
    # the verdict carries an estimate, else the measured speedup; the label says which.
    rank_speedup: float | None = None
    rank_label: str = ""
    estimated_speedup: float | None = None  # the TPU estimate's, for the settings' chip (estimated, not measured)
    estimate_chip: str | None = None
    verdict: dict | None = None

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    @property
    def cpu_timing(self) -> bool:
        """Timings taken on CPU are interpreter times: they say nothing about kernel performance."""
        return self.backend == "cpu" or "cpu_timing" in self.flags

    def as_dict(self) -> dict:
        return asdict(self)


def heldout_seeds() -> list[int]:
    """The seeds final verdicts use; the agent's own loop never runs on them."""
    from maxkernel.settings import get_settings

    s = get_settings()
    return list(range(s.heldout_seed_base, s.heldout_seed_base + s.eval_seeds))


def failure_category(verdict: dict | None) -> str | None:
    """compile / runtime / incorrect / timeout / rejected for a verdict; None when it is correct."""
    if verdict is None:
        return "no_kernel"
    status = verdict.get("status")
    if status == "correct":
        return None
    if status == "error":
        return "compile" if verdict.get("stage") in _COMPILE_STAGES else "runtime"
    if status == "unverifiable_on_cpu":  # compiles for the chip; the CPU interpreter cannot run it
        return "unverifiable"
    return status if status in FAILURES else "runtime"


def speedup_spread(verdict: dict) -> tuple[float | None, float | None]:
    """(low, high) speedup from the timings' quartiles: baseline q1 / kernel q3 and baseline q3 / kernel q1."""
    base = (verdict.get("baseline") or {}).get("samples_ms") or []
    kern = (verdict.get("kernel") or {}).get("samples_ms") or []
    if not base or not kern:
        return None, None
    b1, b3 = np.percentile(base, [25, 75])
    k1, k3 = np.percentile(kern, [25, 75])
    return (float(b1 / k3) if k3 > 0 else None), (float(b3 / k1) if k1 > 0 else None)


def find_kernel(texts: list[str]) -> str | None:
    """The kernel path in an agent's answer ("Best kernel: <path> from iteration ..."), last mention wins."""
    for text in reversed(texts):
        for pattern in _BEST:
            found = pattern.findall(text or "")
            if found:
                return found[-1].strip()
    return None


def find_task_and_size(texts: list[str]) -> tuple[str | None, str]:
    """The suite task and size a request names ("optimize 12p_RMSNorm smoke"); size defaults to smoke."""
    from maxkernel.agents.roots._common import find_task

    for text in reversed(texts):
        task = find_task(text or "")
        if task:
            m = _SIZE.search(text)
            return task, m.group(1) if m else "smoke"
    return None, "smoke"


# One evaluation per (task, size, kernel content, seeds) per process: several metrics ask about the same kernel.
_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()


def _once(key, compute):
    with _CACHE_LOCK:
        slot = _CACHE.setdefault(key, {"lock": threading.Lock()})
    with slot["lock"]:
        if "value" not in slot:
            slot["value"] = compute()
        return slot["value"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _evaluate(evaluator, task, kernel: Path, size: str, seeds: list[int]) -> dict:
    key = ("verdict", task.name, task.digest, size, _digest(kernel), tuple(seeds))
    return _once(key, lambda: evaluator.evaluate(task, kernel, size=size, seeds=seeds).model_dump(mode="json"))


def _reference_verdict(evaluator, task, size: str, seeds: list[int]) -> dict | None:
    """The shipped reference kernel's verdict on the same seeds; None without a correct one."""
    if task.reference_kernel is None:
        return None
    v = _evaluate(evaluator, task, task.reference_kernel, size, seeds)
    return v if v.get("status") == "correct" else None


def _roofline(evaluator, task, size: str, seeds: list[int], verdict: dict) -> tuple[float | None, str]:
    from maxkernel import chips

    chip = chips.get("cpu") if verdict.get("backend") == "cpu" else chips.detect()
    kernel_ms = (verdict.get("kernel") or {}).get("median_ms")
    if not kernel_ms:
        return None, chip.name
    meta = evaluator.task_meta(task, size)
    bound_s = chips.roofline_seconds(chip, meta.get("flops") or 0, meta.get("bytes") or 0)
    return (bound_s / (kernel_ms / 1e3) if bound_s > 0 else None), chip.name


def judge_kernel(task: str, kernel: str | Path | None, size: str = "smoke", *, verdict: dict | None = None,
                 evaluator=None) -> Judgement:
    """Judge `kernel` for `task` on the held-out seeds, with speedups vs XLA and the reference kernel.

    A `verdict` (the evaluate JSON) already taken on the same held-out seeds and size is reused instead of
    running the kernel again. Nothing here trusts the agent: the kernel file is all it takes from it.
    """
    from maxkernel.harness.verdict.evaluate import shared_evaluator
    from maxkernel.tasks import load_task

    t = load_task(task)
    seeds = heldout_seeds()
    base = dict(task=t.name, size=size, seeds=seeds)
    path = Path(kernel) if kernel else None
    if path is None or not path.is_file():
        why = "the agent named no kernel" if path is None else f"the kernel file {path} does not exist"
        return Judgement(**base, kernel=str(path) if path else None, status="no_kernel", failure="no_kernel",
                         reason=why)
    evaluator = evaluator or shared_evaluator()
    reuse = (verdict is not None and verdict.get("size") == size
             and (verdict.get("correctness") or {}).get("seeds") == seeds)
    v = verdict if reuse else _evaluate(evaluator, t, path, size, seeds)
    used = (v.get("correctness") or {}).get("seeds") or seeds  # drawn fresh by the harness, as many as asked
    common = dict(base, seeds=used, kernel=str(path), status=v["status"], failure=failure_category(v),
                  reason=v.get("reason", ""),
                  backend=v.get("backend", ""), flags=list(v.get("flags") or []),
                  uses_library_kernel=v.get("uses_library_kernel") or "", verdict=v)
    if v["status"] != "correct":
        return Judgement(**common)
    low, high = speedup_spread(v)
    ref_v = _reference_verdict(evaluator, t, size, seeds)
    ref = ref_v.get("speedup") if ref_v else None
    speedup = v.get("speedup")
    roofline, chip = _roofline(evaluator, t, size, seeds, v)
    # Both speedups are against the XLA baseline timed the same way (in the judge's process), so their ratio
    # cancels that baseline.
    vs_ref = speedup / ref if speedup and ref else None
    from maxkernel.harness.verdict.result import rank_speedup

    rank, label = rank_speedup(v)
    ref_rank, ref_label = rank_speedup(ref_v) if ref_v else (None, "")
    est = v.get("estimate") or {}
    return Judgement(**common, chip=chip, speedup=speedup, speedup_low=low, speedup_high=high,
                     reference_speedup=ref, speedup_vs_reference=vs_ref, roofline_fraction=roofline,
                     reference_rank_speedup=ref_rank, reference_rank_label=ref_label,
                     rank_speedup=rank, rank_label=label, estimated_speedup=est.get("speedup_estimate"),
                     estimate_chip=est.get("chip"))
