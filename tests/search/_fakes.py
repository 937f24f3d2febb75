"""Synthetic kernel producer and stage executor for fast tests of the search machinery."""

from __future__ import annotations

import re
import threading
import time

from maxkernel.search.node_agent import Produced

# A synthetic kernel is a few comment lines the fake executor reads: its speed, and the stage it fails at.
_FAILS = {"vmem-budget": "compile", "fewer-relayouts": "interpret"}


def synthetic_source(job) -> str:
    """Deterministic in (depth, strategy): deeper is faster; some strategies break the kernel."""
    strategy = re.search(r"\((\S+?),", job.strategy_text).group(1)
    speed = round(0.5 + 0.25 * job.depth + (sum(map(ord, strategy)) % 7) / 100, 4)
    lines = [f"# depth: {job.depth}", f"# strategy: {strategy}", f"# speed: {speed}"]
    if strategy in _FAILS:
        lines.append(f"# fails: {_FAILS[strategy]}")
    return "\n".join(lines) + "\n"


class FakeProducer:
    """Stands in for the agents: writes a synthetic kernel; counts calls; optional delay and token cost."""

    def __init__(self, delay: float = 0.0, tokens: int = 100, cost: float = 0.01, heldout_fail: set | None = None):
        self.delay, self.tokens, self.cost = delay, tokens, cost
        self.calls: list[int] = []
        self.heldout_fail = heldout_fail or set()
        self.crash_on: dict[int, BaseException] = {}  # node id -> what producing it raises
        self.inflight = self.peak = 0
        self._lock = threading.Lock()

    def __call__(self, job, key, config, progress):
        with self._lock:
            self.calls.append(job.node_id)
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
        time.sleep(self.delay)
        with self._lock:
            self.inflight -= 1
        if job.node_id in self.crash_on:
            raise self.crash_on[job.node_id]
        src = synthetic_source(job)
        if job.node_id in self.heldout_fail:
            src += "# heldout: fail\n"
        return Produced(source=src, advice=f"advice on node {job.node_id}", tokens=self.tokens, cost_usd=self.cost,
                        llm_calls=2, note="synthetic")


class FakeExecutor:
    """Stands in for the sandboxed harness: judges a synthetic kernel from its comment lines."""

    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.calls: list[str] = []
        self._lock = threading.Lock()
        self.inflight = 0
        self.peak = 0
        self.device_inflight = 0
        self.device_peak = 0

    def __call__(self, stage: str, spec: dict, source: str) -> dict:
        with self._lock:
            self.calls.append(stage)
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
            if stage != "compile":
                self.device_inflight += 1
                self.device_peak = max(self.device_peak, self.device_inflight)
        try:
            time.sleep(self.delay)
            fails = re.search(r"# fails: (\w+)", source)
            fails = fails.group(1) if fails else None
            speed = float(re.search(r"# speed: ([\d.]+)", source).group(1))
            if stage == "compile":
                return {"ok": fails != "compile", "stage": "compile", "summary": "synthetic compile",
                        "error": "VMEM overflow" if fails == "compile" else None}
            if stage == "interpret":
                ok = fails != "interpret"
                return {"ok": ok, "status": "correct" if ok else "incorrect", "summary": "synthetic test"}
            if stage == "heldout" and "# heldout: fail" in source:
                return {"status": "incorrect", "reason": "held-out seed mismatch", "speedup": None, "flags": []}
            return {"status": "correct", "reason": "synthetic", "speedup": speed, "flags": [], "backend": "cpu"}
        finally:
            with self._lock:
                self.inflight -= 1
                self.device_inflight -= stage != "compile"
