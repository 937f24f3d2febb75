"""The harness's verdict on a candidate kernel: a frozen record with the raw samples behind every figure."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Correctness", "SeedCheck", "TimedCheck", "Timing", "Verdict", "Status", "rank_speedup"]

# unverifiable_on_cpu: jax's TPU interpreter cannot run a kernel that compiles for the chip; it needs hardware.
Status = Literal["correct", "incorrect", "error", "timeout", "rejected", "unverifiable_on_cpu"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class SeedCheck(_Frozen):
    seed: int
    ok: bool
    max_rel_err: float | None = None
    fro_err: float | None = None  # relative Frobenius error, worst over outputs
    tolerance: float | None = None  # the bound of the output whose max-normalised error is max_rel_err
    fro_tolerance: float | None = None  # the bound of the output whose Frobenius error is fro_err
    reason: str = ""
    bad_elements: int = 0
    worst_index: list[int] = Field(default_factory=list)
    worst_out: float | None = None
    worst_ref: float | None = None


class TimedCheck(_Frozen):
    """What was checked of one timed repetition's outputs."""

    rep: int
    input: int  # which input set it ran on
    checked: str
    ok: bool


class Correctness(_Frozen):
    max_rel_err: float | None = None  # worst over seeds and outputs; None when nothing was compared
    # The task's fixed bound of the output whose error is max_rel_err (an f32 state beside a bf16 output: 0.0033
    # against 0.02, not against the state's 0.001), else the tightest over outputs.
    tolerance: float | None = None
    max_fro_err: float | None = None  # worst relative Frobenius error
    fro_tolerance: float | None = None  # calibrated: a small factor over XLA's own error (of max_fro_err's output)
    baseline_errors: list[dict] = Field(default_factory=list)  # XLA's own {max, fro} error per output
    seeds: list[int] = Field(default_factory=list)  # the seeds actually used, for replay (--replay-seeds)
    seeds_drawn: Literal["fresh", "replayed"] = "fresh"  # fresh: drawn unpredictably for this evaluation
    per_seed: list[SeedCheck] = Field(default_factory=list)
    timed: list[TimedCheck] = Field(default_factory=list)  # every timed repetition's outputs, checked
    # The second size drawn for this verdict (dims; {} when the task offers none) and its one input set's check.
    check_size: dict = Field(default_factory=dict)
    check: SeedCheck | None = None
    # The small-blocks check (maxkernel.harness.verdict.small_blocks): {config, steps, default_steps, ok[, reason]}
    # when it ran, {config: None, skipped} when no declared configuration could, {} without TUNABLES.
    small_blocks: dict = Field(default_factory=dict)


class Timing(_Frozen):
    median_ms: float
    iqr_ms: float
    samples_ms: list[float]

    @classmethod
    def of(cls, samples: list[float]) -> "Timing | None":
        if not samples:
            return None
        q1, med, q3 = np.percentile(samples, [25, 50, 75])
        return cls(median_ms=float(med), iqr_ms=float(q3 - q1), samples_ms=[float(s) for s in samples])


class Verdict(_Frozen):
    task: str
    kernel_file: str
    size: str
    status: Status
    reason: str = ""
    correctness: Correctness = Field(default_factory=Correctness)
    baseline: Timing | None = None
    kernel: Timing | None = None
    speedup: float | None = None
    backend: str = ""
    timing_label: str = ""  # what the times measure (e.g. CPU/interpreter wall time: not kernel performance)
    flags: list[str] = Field(default_factory=list)
    # The library kernels the candidate calls (jax.experimental.pallas.ops, tokamax, ...): its speed is then the
    # library's, not the agent's work; "" when it calls none.
    uses_library_kernel: str = ""
    # Cause and fix of the failure (harness/hints/diagnose.py), its error family and kernel line when known; on a correct
    # verdict, a bug the CPU checks cannot see (lint: e.g. a reduction axis marked parallel).
    hint: str = ""
    hint_family: str = ""
    hint_line: int | None = None
    integrity: dict = Field(default_factory=dict)  # the FLOP census: pallas_share, pallas_calls, ...
    isolation: str = ""  # bwrap (unprivileged user namespace, allow-listed mounts) or none
    passed_env: list[str] = Field(default_factory=list)  # extra variables the user let into the sandbox
    compile_s: float | None = None
    wall_s: float = 0.0
    overhead_s: float | None = None  # harness time beyond the candidate's own compile and runs
    stage: str = ""  # where an error happened: import, trace, compile, run, sandbox
    detail: str = ""  # traceback tail or sandbox log for errors
    # Off a TPU: the TPU estimate for the target chip (harness.estimate.Estimate, without its per-program parts),
    # labelled as an estimate; what the loop, search and autotuner rank by there.
    estimate: dict | None = None
    # A task with several named configs: config -> {size, status, reason, speedup, max_rel_err, speedup_estimate,
    # kernel_ms, baseline_ms}; the verdict above is the combination (harness/verdict/configs.py). {} for one config.
    configs: dict = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "correct"

    @property
    def rank(self) -> tuple[float | None, str]:
        """(speedup to rank by, what it is): see rank_speedup."""
        return rank_speedup(self.model_dump(include={"speedup", "backend", "estimate", "timing_label"}))


def rank_speedup(verdict: dict) -> tuple[float | None, str]:
    """The speedup candidates are ranked by, and its label. On a TPU (or GPU) the measured speedup; off one, the
    estimated TPU speedup where the verdict carries an estimate, else the measured CPU speedup, labelled as such
    (every timed call ran on inputs the kernel had not seen, so a memo buys nothing there). A kernel whose estimate
    was withheld because the program it would price is not the one checked (stage "program") is not ranked."""
    backend = verdict.get("backend") or ""
    est = verdict.get("estimate") or {}
    if backend == "cpu" and est.get("ok") and est.get("speedup_estimate"):
        return float(est["speedup_estimate"]), f"estimated TPU speedup on {est.get('chip')} (libtpu static profile)"
    if backend == "cpu" and est.get("stage") == "program":
        return None, "not ranked: the program changes with the size, so no estimate prices the one checked"
    speedup = verdict.get("speedup")
    if backend == "cpu":
        return speedup, "CPU interpreter speedup (no TPU estimate): ranks nothing on a TPU"
    return speedup, f"measured on {backend}" if backend else "measured"
