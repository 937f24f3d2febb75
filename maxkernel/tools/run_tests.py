"""run_tests: the harness's strict correctness run, reported so that a debugger knows where to look."""

from __future__ import annotations

from pydantic import BaseModel, Field

from maxkernel.harness.verdict.evaluate import shared_evaluator
from maxkernel.harness.verdict.result import Verdict

__all__ = ["Mismatch", "TestReport", "run_tests", "report_from_verdict"]


class Mismatch(BaseModel):
    seed: int
    output: str = Field(description="Which output and what went wrong.")
    bad_elements: int
    worst_index: list[int]
    worst_out: float | None
    worst_ref: float | None
    rel_err: float | None
    tolerance: float | None
    block: list[int] | None = Field(None, description="Grid block holding the worst element, when known.")


class TestReport(BaseModel):
    ok: bool
    summary: str
    status: str
    error: str | None = None
    stage: str = ""
    races: bool | None = None
    max_rel_err: float | None = None
    tolerance: float | None = None
    seeds: list[int] = Field(default_factory=list)
    mismatch: list[Mismatch] = Field(default_factory=list)
    pallas_share: float | None = None
    hint: str | None = Field(None, description="Cause and fix of the failure; on a pass, a bug no CPU check sees.")
    hint_family: str | None = None


def _block_of(index: list[int], shape_hint: list[dict]) -> list[int] | None:
    """The grid block of `index`, if one pallas_call output has exactly this rank and covers it."""
    for ob in shape_hint:
        if len(ob["array"]) == len(index) and all(i < a for i, a in zip(index, ob["array"])):
            return [i // max(b, 1) for i, b in zip(index, ob["block"])]
    return None


def report_from_verdict(v: Verdict) -> TestReport:
    """A test report (what a debugger needs) from a harness verdict."""
    ok = v.status == "correct"
    mism = []
    for check in v.correctness.per_seed:
        if check.ok:
            continue
        mism.append(Mismatch(seed=check.seed, output=check.reason, bad_elements=check.bad_elements,
                             worst_index=check.worst_index, worst_out=check.worst_out, worst_ref=check.worst_ref,
                             rel_err=check.max_rel_err, tolerance=v.correctness.tolerance,
                             block=_block_of(check.worst_index, v.integrity.get("out_blocks", []))
                             if check.worst_index else None))
    races = "data race" in v.reason
    if ok:
        summary = (f"PASS on seeds {v.correctness.seeds}: worst error {v.correctness.max_rel_err:.3g} "
                   f"(tolerance {v.correctness.tolerance:.3g}), no races, no out-of-bounds access.")
        small = v.correctness.small_blocks or {}
        if small.get("config"):  # what the small-blocks check ran (harness/verdict/small_blocks.py)
            from maxkernel.harness.verdict.small_blocks import describe

            summary += (f" Also right with its smallest declared tunables ({describe(small['config'])}: "
                        f"{small.get('steps')} grid steps where the defaults take {small.get('default_steps')}).")
    elif v.status == "incorrect" and mism:
        m = mism[0]
        where = f", grid block {tuple(m.block)}" if m.block else ""
        nan = (" NaN usually means an accumulator or scratch buffer was never initialised."
               if "NaN" in m.output and not v.hint else "")
        summary = f"FAIL on {len(mism)} of {len(v.correctness.seeds)} seeds. {m.output}{where}.{nan}"
        if races:
            summary = ("FAIL: the strict TPU interpreter detected a data race (a buffer read or written while a DMA "
                       "into it may still be in flight: wait on the copy first). " + summary)
    elif v.status == "incorrect":
        summary = f"FAIL: {v.reason}"
    else:
        summary = f"{v.status.upper()} at {v.stage or 'run'}: {v.reason}"
    if v.configs:  # a task with several configs was tested at each: say which, and how each went
        summary = "configs " + ", ".join(f"{name} ({c.get('size')}: {c.get('status')})"
                                          for name, c in v.configs.items()) + ". " + summary
    if v.hint:
        where = f" (kernel.py line {v.hint_line})" if v.hint_line else ""
        summary = summary[:1200] + (f"\nWarning{where}: {v.hint}" if ok else f"\nHint{where}: {v.hint}")
    return TestReport(ok=ok, summary=summary[:1600], status=v.status, error=None if ok else v.reason,
                      stage=v.stage, races=True if races else (False if ok else None),
                      max_rel_err=v.correctness.max_rel_err, tolerance=v.correctness.tolerance,
                      seeds=v.correctness.seeds, mismatch=mism, pallas_share=v.integrity.get("pallas_share"),
                      hint=v.hint or None, hint_family=v.hint_family or None)


def run_tests(task: str, kernel: str, size: str = "smoke", seeds: int = 3, timeout: float | None = None) -> TestReport:
    """Runs the fixed correctness tests of a Pallas kernel for a benchmark task.

    The kernel runs in a sandbox on fresh inputs for several seeds, under the strict TPU interpreter on CPU
    (out-of-bounds block indices raise, scratch memory starts as NaN, DMA races are detected) or natively on
    an accelerator. Tolerances are fixed by the task; they cannot be changed.

    Args:
        task: Suite task name (e.g. "12p_RMSNorm") or a task folder path.
        kernel: Path of the kernel file; it must define workload(*inputs) taking the task's inputs.
        size: "smoke" (CPU-sized, default) or "full".
        seeds: How many seeds to test (at least 1; default 3).
        timeout: Seconds before the run is killed (default: the harness setting).

    Returns:
        A report: ok, a one-paragraph summary, and per-seed mismatches (which output, how many elements,
        worst location and its grid block, error against tolerance) or the error text.
    """
    # No TPU estimate: the report never shows one, and pricing a kernel (profiled compiles at full size) can take
    # longer than the test itself (met writing rw_moe_permute_unpermute: a 20-second test ran 10 minutes).
    v = shared_evaluator().evaluate(task, kernel, size=size, seeds=list(range(max(seeds, 1))), timeout=timeout,
                                    reps=0, detect_races=True, estimate=False)
    return report_from_verdict(v)
