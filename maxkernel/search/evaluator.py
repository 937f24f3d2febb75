"""The evaluator adapter: every candidate goes through one cascade, cheapest check first (lower -> compile ->
strict interpret -> timing), on the search's frozen scoreboard, with each stage's result memoised by source."""

from __future__ import annotations

import contextvars
import hashlib
import json
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from maxkernel.harness.verdict.result import rank_speedup
from maxkernel.search.config import SearchConfig

__all__ = ["Cascade", "Check", "NodeVerdict", "run_stage", "source_sha", "STAGES", "DEVICE_STAGES", "SPENT"]

STAGES = ("compile", "interpret", "timing", "heldout")
DEVICE_STAGES = ("interpret", "timing", "heldout")  # these run the kernel; compile is deviceless
# Seconds each stage cost the node being built, and how many stages it got from the memo. A context
# variable, so the node's agent (other threads via asyncio.to_thread) adds to the same record.
SPENT: contextvars.ContextVar[dict | None] = contextvars.ContextVar("search_stage_spent", default=None)


def source_sha(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def stage_spec(config: SearchConfig) -> dict:
    """What a stage needs to know, JSON-able so it can travel to another host."""
    return {"task": config.task, "size": config.size, "chip": config.chip, "compile_size": config.compile_size,
            "seeds": list(config.seeds), "heldout_seeds": list(config.heldout_seeds), "reps": config.reps,
            "timeout": config.eval_timeout_s}


def run_stage(stage: str, spec: dict, source: str) -> dict:
    """Run one cascade stage on `source` in this process (through the sandboxed harness); JSON-able result."""
    from maxkernel.harness.verdict.evaluate import shared_evaluator
    from maxkernel.tools.compile_pallas import compile_pallas
    from maxkernel.tools.run_tests import report_from_verdict

    with tempfile.TemporaryDirectory(prefix="mk-stage-") as tmp:
        kernel = Path(tmp) / "kernel.py"
        kernel.write_text(source)
        if stage == "compile":
            out = compile_pallas(spec["task"], str(kernel), spec["chip"], spec["compile_size"]).model_dump()
        elif stage == "interpret":
            v = shared_evaluator().evaluate(spec["task"], kernel, size=spec["size"], seeds=spec["seeds"], reps=0,
                                            detect_races=True, timeout=spec["timeout"], estimate=False)
            out = report_from_verdict(v).model_dump()
        elif stage in ("timing", "heldout"):
            seeds = spec["seeds"] if stage == "timing" else spec["heldout_seeds"]
            # Correctness was judged strictly (races, NaN scratch) one stage earlier; time without that cost.
            v = shared_evaluator().evaluate(spec["task"], kernel, size=spec["size"], seeds=seeds, reps=spec["reps"],
                                            detect_races=stage == "heldout", timeout=spec["timeout"])
            out = v.model_dump(mode="json")
        else:
            raise ValueError(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")
        # The temporary path means nothing to a reader (and would break the memo's determinism).
        return json.loads(json.dumps(out).replace(str(kernel), "kernel.py").replace(tmp, "."))


@dataclass
class Check:
    """The cheap stages' outcome: what the debugger needs when it failed."""

    ok: bool
    stage: str
    verdict: str  # compile_error, or the harness status of the strict run
    feedback: str
    results: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)


@dataclass
class NodeVerdict:
    verdict: str
    stage: str
    speedup: float | None
    summary: str
    results: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.verdict == "correct"


class Cascade:
    """Judges kernel sources for one search; thread-safe; identical (scope, source, stage) runs once."""

    def __init__(self, config: SearchConfig, graph=None, executor: Callable[[str, dict, str], dict] | None = None,
                 device_slot=None):
        self.config = config
        self.spec = stage_spec(config)
        self.graph = graph
        self.executor = executor or run_stage
        self.device_slot = device_slot  # a context manager factory, or None (e.g. Ray schedules devices itself)
        self._memo: dict[tuple, dict] = {}
        self._locks: dict[tuple, threading.Lock] = {}
        self._guard = threading.Lock()
        self.runs = 0  # stages actually run (not memo hits), for throughput figures

    def scope(self, node_id: int | None) -> str:
        return "" if self.config.dedupe or node_id is None else f"node-{node_id}"

    def stage(self, stage: str, source: str, scope: str = "") -> tuple[dict, float]:
        """(result, seconds spent now: 0 for a memo hit)."""
        key = (scope, source_sha(source), stage)
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # a second node with the same kernel waits for the first one's result
            hit = self._memo.get(key)
            if hit is None and self.graph is not None:
                hit = self.graph.eval_result(*key)
            spent = SPENT.get()
            if hit is not None:
                self._memo[key] = hit
                if spent is not None:
                    spent["reused"] = spent.get("reused", 0) + 1
                return hit, 0.0
            t0 = time.monotonic()
            if self.device_slot is not None and stage in DEVICE_STAGES:
                with self.device_slot():
                    result = self.executor(stage, self.spec, source)
            else:
                result = self.executor(stage, self.spec, source)
            wall = time.monotonic() - t0
            self.runs += 1
            if spent is not None:
                spent[f"{stage}_s"] = round(spent.get(f"{stage}_s", 0.0) + wall, 3)
                spent["stages_run"] = spent.get("stages_run", 0) + 1
            if self.graph is not None:
                self.graph.put_eval(*key, result, wall)
            self._memo[key] = result
            return result, wall

    def check(self, source: str, scope: str = "") -> Check:
        """Lower and compile for the chip, then the strict interpreted tests; stops at the first failure."""
        comp, t_comp = self.stage("compile", source, scope)
        timings = {"compile_s": round(t_comp, 3)}
        if not comp.get("ok"):
            feedback = f"compile_kernel for {self.config.chip} failed:\n{comp.get('summary', '')}\n{comp.get('error') or ''}"
            return Check(False, comp.get("stage") or "compile", "compile_error", feedback[:3000], {"compile": comp}, timings)
        test, t_test = self.stage("interpret", source, scope)
        timings["interpret_s"] = round(t_test, 3)
        results = {"compile": comp, "interpret": test}
        if not test.get("ok"):
            return Check(False, "interpret", test.get("status") or "incorrect",
                         f"test_kernel failed:\n{test.get('summary', '')}"[:3000], results, timings)
        return Check(True, "interpret", "correct", f"Compiles for {self.config.chip} and passes the tests: "
                                                   f"{test.get('summary', '')}", results, timings)

    def evaluate(self, source: str | None, scope: str = "") -> NodeVerdict:
        """The node's verdict on the scoreboard: the cheap checks, then the timed harness run."""
        if source is None:
            return NodeVerdict("no_kernel", "", None, "no kernel.py was written")
        check = self.check(source, scope)
        if not check.ok:
            return NodeVerdict(check.verdict, check.stage, None, check.feedback.splitlines()[1][:300]
                               if "\n" in check.feedback else check.feedback[:300], check.results, check.timings)
        timed, t_time = self.stage("timing", source, scope)
        timings = {**check.timings, "timing_s": round(t_time, 3)}
        results = {**check.results, "timing": timed}
        # The node's fitness: the estimated TPU speedup off a TPU, measured speedup on one (rank_speedup).
        speedup, label = rank_speedup(timed)
        summary = f"harness verdict {timed['status'].upper()}: {timed.get('reason', '')[:300]}"
        if speedup is not None:
            summary += f"; {speedup:.3g}x vs baseline ({label})"
        if (timed.get("estimate") or {}).get("ok") and timed.get("speedup") is not None:
            summary += f"; measured under the CPU interpreter: {timed['speedup']:.3g}x"
        return NodeVerdict(timed["status"], "timing", speedup if timed["status"] == "correct" else None, summary,
                           results, timings)

    def heldout(self, source: str) -> dict:
        """The final verdict on seeds no node was scored on (strict: race detection on)."""
        return self.stage("heldout", source, "")[0]
