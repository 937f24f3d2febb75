"""The controller: wires the candidate database, algorithm, strategy sampler, evaluator cascade and workers
from one config, runs generations under the budgets, and gives the answer re-verified on held-out seeds."""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from maxkernel.harness.verdict.result import rank_speedup
from maxkernel.search.algorithms import build_algorithm
from maxkernel.search.config import SearchConfig
from maxkernel.search.evaluator import SPENT, Cascade, run_stage, source_sha
from maxkernel.search.graph import Graph, Node
from maxkernel.search.node_agent import NodeJob, build_node
from maxkernel.search.strategies import StrategySampler
from maxkernel.search.workers import (
    LocalPool,
    SearchContext,
    Slots,
    register,
    unregister,
)

__all__ = ["Controller", "SearchError", "run_search"]


class SearchError(RuntimeError):
    """The search cannot start or continue (no config, a changed scoreboard, a broken backend)."""


class Controller:
    def __init__(self, out: str | Path, config: SearchConfig | None = None, *, producer: Callable | None = None,
                 executor: Callable | None = None, progress: Callable[[dict], None] | None = None):
        self.out = Path(out)
        self.graph = Graph(self.out)
        stored = self.graph.meta("config")
        if stored is not None:
            self.config = SearchConfig.model_validate(stored).resumed_with(config)
        elif config is None:
            raise SearchError(f"no search in {self.out}: give a task to start one")
        else:
            self.config = config
        self.graph.set_meta("config", self.config.model_dump(mode="json"))
        (self.out / "config.json").write_text(json.dumps(self.config.model_dump(mode="json"), indent=2) + "\n")
        lim = self.config.limits
        self._owned_executor = None
        if executor is None and self.config.backend == "ray":
            from maxkernel.search.ray_backend import RayBackendError, RayExecutor

            try:
                executor = self._owned_executor = RayExecutor(self.config.ray_address, self.config.ray_resource,
                                                              devices=lim.eval_workers)
            except RayBackendError as exc:
                raise SearchError(str(exc)) from exc
        executor = executor or run_stage
        device_limited = getattr(executor, "device_limited", True)
        self.slots = Slots(lim.model_workers, lim.eval_workers if device_limited else None)
        self.cascade = Cascade(self.config, self.graph, executor, self.slots.device_slot)
        self.algorithm = build_algorithm(self.config)
        self.pool = LocalPool(lim.workers)
        self.producer = producer or build_node
        self._progress = progress or (lambda _e: None)
        self._lock = threading.Lock()
        self._mark = time.monotonic()

    # -- budgets ------------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self.graph.meta("elapsed_s", 0.0) + (time.monotonic() - self._mark)

    def _save_elapsed(self) -> None:
        with self._lock:
            now = time.monotonic()
            self.graph.add_elapsed(now - self._mark)
            self._mark = now

    def stop_reason(self) -> str | None:
        """Why no new node may start now, or None."""
        lim, t = self.config.limits, self.graph.totals()
        if t["done"] + t["running"] >= lim.max_nodes:
            return f"node budget ({lim.max_nodes}) used"
        if lim.max_tokens and t["tokens"] >= lim.max_tokens:
            return f"token budget ({lim.max_tokens}) used"
        if lim.max_cost_usd and t["cost_usd"] >= lim.max_cost_usd:
            return f"cost budget (${lim.max_cost_usd}) used"
        if lim.max_wall_s and self.elapsed() >= lim.max_wall_s:
            return f"wall-time budget ({lim.max_wall_s:g} s) used"
        return None

    def emit(self, event: str, text: str, **extra) -> None:
        t = self.graph.totals()
        self._progress({"event": event, "text": text, "totals": t, "elapsed_s": round(self.elapsed(), 1), **extra})

    # -- the run ------------------------------------------------------------------------------------------
    def run(self) -> dict:
        recovered = self.graph.recover()
        if recovered:
            self.emit("resume", f"resuming: nodes {recovered} were in flight when the search stopped; redoing them")
        key = register(SearchContext(self.cascade, self.slots, self.config))
        reason = None
        try:
            gen = 0
            while reason is None:
                nodes = self.graph.generation(gen)
                short = self.graph.meta("short_generations", {})
                if not nodes or str(gen) in short:  # plan it, or top up one a node budget cut short
                    room = self.config.limits.max_nodes - self.graph.totals()["nodes"]
                    if not nodes and (self.stop_reason() or room <= 0):
                        reason = self.stop_reason() or f"node budget ({self.config.limits.max_nodes}) used"
                        break
                    if room > 0:
                        nodes = self._plan(gen, nodes, room, short)
                    if not nodes:
                        reason = f"{self.config.algorithm} finished after {gen} generations"
                        break
                pending = [n for n in nodes if n.status == "pending"]
                self.pool.run(pending, lambda n: self._run_node(n, key))
                self._save_elapsed()
                self.render()
                if any(n.status == "pending" for n in self.graph.generation(gen)):
                    reason = self.stop_reason() or "stopped"
                gen += 1
            return self.finish(reason)
        finally:
            unregister(key)
            self._save_elapsed()
            if self._owned_executor is not None:
                self._owned_executor.close()

    def _plan(self, gen: int, nodes: list[Node], room: int, short: dict) -> list[Node]:
        """Write generation `gen` (or the part of it a budget cut off earlier), at most `room` nodes."""
        sampler = StrategySampler(self.config.operator, self.graph.strategies())
        earlier = [n for n in self.graph.nodes() if n.gen < gen]
        proposals = self.algorithm.propose(gen, earlier, sampler)
        take = proposals[len(nodes):len(nodes) + room]
        short.pop(str(gen), None)
        if len(proposals) > len(nodes) + len(take):
            short[str(gen)] = len(proposals) - len(nodes) - len(take)
        nodes = self.graph.add_generation(gen, take, start=len(nodes), meta={"short_generations": short})
        if take:
            self.emit("generation", f"generation {gen}: {len(take)} nodes ({', '.join(p.strategy for p in take)})",
                      gen=gen)
        return nodes

    def _run_node(self, node: Node, key: str) -> None:
        if self.stop_reason() or not self.graph.claim(node.id):
            return  # left pending: a resumed search with a larger budget picks it up
        parent = self.graph.node(node.parent) if node.parent is not None else None
        job = NodeJob(node.id, node.depth, node.strategy_text, parent.source if parent else None,
                      _summary(parent), self.out / "nodes" / f"node-{node.id}", self.cascade.scope(node.id),
                      profile=node.gen + 1 < self.algorithm.generations())
        self.emit("node_started", f"node {node.id} (gen {node.gen}, parent {node.parent}): {node.strategy}",
                  node=node.id)
        t0 = time.monotonic()
        spent: dict = {}
        SPENT.set(spent)  # this worker thread's context: the node's stage costs accumulate here
        try:
            made = self.producer(job, key, self.config, lambda line: self.emit("log", line, node=node.id))
            v = self.cascade.evaluate(made.source, job.memo_scope)
            done = self.graph.finish(
                node.id, verdict=v.verdict, stage=v.stage, speedup=v.speedup, verdict_json=v.results,
                source=made.source, source_sha=source_sha(made.source) if made.source is not None else None,
                advice=made.advice, note=f"{v.summary}\n{made.note}",
                timings={**spent, "total_s": round(time.monotonic() - t0, 3)},
                tokens=made.tokens, cost_usd=made.cost_usd, llm_calls=made.llm_calls)
        except Exception as exc:  # noqa: BLE001  (a model or backend failure ends this node, not the search)
            done = self.graph.finish(node.id, verdict="failed", note=f"{type(exc).__name__}: {exc}\n"
                                     + traceback.format_exc()[-1500:],
                                     timings={**spent, "total_s": round(time.monotonic() - t0, 3)})
        self._save_elapsed()
        speed = f" {done.speedup:.3g}x" if done.speedup is not None else ""
        self.emit("node_finished", f"node {done.id}: {done.verdict}{speed}", node=done.id)

    # -- the answer ---------------------------------------------------------------------------------------
    def finish(self, reason: str | None) -> dict:
        ranked = sorted((n for n in self.graph.nodes() if n.correct and not n.pruned),
                        key=lambda n: (-(n.speedup or 0.0), n.id))
        best, tried = None, []
        for n in ranked[:self.config.final_candidates]:
            held = self.cascade.heldout(n.source)
            tried.append({"node": n.id, "status": held["status"], "reason": held.get("reason", "")[:300]})
            if held["status"] == "correct":
                best = (n, held)
                break
        totals = self.graph.totals()
        result = {"status": "correct" if best else ("failed_heldout" if ranked else "no_correct_kernel"),
                  "stop_reason": reason or "stopped", "algorithm": self.config.algorithm, "task": self.config.task,
                  "size": self.config.size, "nodes": totals["nodes"], "totals": totals, "heldout_tried": tried,
                  "best": None, "out": str(self.out)}
        if best:
            node, held = best
            kernel = self.out / "best_kernel.py"
            kernel.write_text(node.source)
            (self.out / "best_verdict.json").write_text(json.dumps(held, indent=2) + "\n")
            _, label = rank_speedup(node.verdict_data.get("timing") or {})
            result["best"] = {"node": node.id, "kernel": str(kernel.resolve()), "speedup": node.speedup,
                              "speedup_label": label, "heldout_speedup": held.get("speedup"),
                              "heldout_estimate": held.get("estimate"),
                              "heldout_seeds": list(self.config.heldout_seeds), "strategy": node.strategy}
        self.graph.set_meta("result", result)
        (self.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        result["graph_html"] = str(self.render())
        text = (f"best node {best[0].id}: {best[0].speedup:.3g}x ({result['best']['speedup_label']}), correct on "
                f"held-out seeds" if best and best[0].speedup is not None else
                f"best node {best[0].id}, correct on held-out seeds" if best else f"no kernel passed ({result['status']})")
        self.emit("final", f"{result['stop_reason']}; {text}")
        return result

    def render(self) -> Path:
        from maxkernel.search.render import write_html

        return write_html(self.graph, self.out / "graph.html", title=f"{self.config.algorithm} search: {self.config.task}")


def _summary(node: Node | None) -> str:
    if node is None:
        return "none yet: this is a first kernel for the task"
    speed = f"{node.speedup:.3g}x vs baseline" if node.speedup is not None else "no speedup measured"
    return f"parent node {node.id} ({node.strategy}): harness {node.verdict}, {speed}"


def run_search(out: str | Path, config: SearchConfig | None = None, **kw) -> dict:
    """Start (config given) or resume (same `out`) a search and run it to its end or a budget."""
    return Controller(out, config, **kw).run()
