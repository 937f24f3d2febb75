"""The autonomous policy: plan -> implement -> compile/debug -> test -> evaluate -> profile -> tune -> iterate.

The loop's control flow is code, not a model's choice: every gate is a real tool (compiler, strict tests,
the harness), and the answer is always the best kernel the harness judged correct, re-verified on held-out
seeds. Sub-agents do the creative steps, each from a scoped context (task, chip, plan, best kernel, attempt
ledger) built from state, so prompts stay flat. A sub-agent step that fails (its model gave up after retries,
it wrote no usable file twice) is counted and the loop moves on: the best correct kernel stays. The loop's
position lives in session state, so a stopped run resumes at the iteration it was in.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from pathlib import Path
from typing import AsyncGenerator

from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event

from maxkernel.agents.roots import attempts
from maxkernel.agents.roots._common import find_task, one_line, request_text, save_text_artifact, say, session_setup
from maxkernel.agents.usage import FAULTS_KEY, USAGE_KEY
from maxkernel.knowledge.examples import remember_proven
from maxkernel.settings import get_settings

__all__ = ["AutoOrchestrator", "StepFailed", "estimate_text"]

LOOP = "loop"  # state key: {iteration, no_gain, history, best, judged, failed_steps, elapsed_s, finished}
# State the sub-agents read or the run reports that belongs to one task's loop.
_PER_TASK = ("plan", "advice", "best_summary", "verdict_summary", "last_error", "implementation_note", "debug_note",
             "tuning_note", "test_report", "result", "result_summary", "ledger", "best_kernel", "debug_history",
             "reask", "last_tune")

_AGAIN = re.compile(r"\bagain\b", re.I)  # "optimize X again" continues a finished session's loop


def estimate_text(verdict: dict | None) -> str:
    """A verdict's TPU estimate against the XLA baseline on the same chip, said whole (chip, both times, the
    speedup), or why there is none: what the run's answer carries off a TPU, where CPU time says nothing."""
    v = verdict or {}
    est = v.get("estimate") or {}
    if est.get("ok") and est.get("estimated_ms") is not None and est.get("baseline_estimated_ms") is not None:
        return (f"TPU estimate on {est['chip']}: {est['estimated_ms']:.3g} ms vs XLA {est['baseline_estimated_ms']:.3g} ms"
                f", {est['speedup_estimate']:.3g}x (libtpu static profile: estimated, not measured)")
    if est:
        why = one_line(est.get("error") or est.get("summary") or "no detail", 240)
        return f"no TPU estimate on {est.get('chip') or get_settings().chip}: {why}"
    if v.get("backend") not in (None, "", "cpu") and v.get("speedup") is not None:
        return f"{v['speedup']:.3g}x vs XLA, measured on {v['backend']}"
    if not get_settings().estimate:
        return "no TPU estimate (estimates are off: MAXKERNEL_ESTIMATE=false)"
    return "no TPU estimate"


class StepFailed:
    """What a sub-agent step that raised yields instead of its events ending normally."""

    def __init__(self, role: str, error: BaseException):
        self.role, self.error = role, error

    def __str__(self) -> str:
        return f"{self.role} step failed: {one_line(str(self.error), 300)}"


class AutoOrchestrator(BaseAgent):
    """Routes deterministically over the sub-agent pool; see the module docstring."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        state = ctx.session.state
        task = find_task(request_text(ctx)) or state.get("task")
        if not task:
            yield say(ctx, self.name, "Which task? Say e.g. 'optimize 12p_RMSNorm' (any task of either suite, "
                                      "or a folder with baseline.py).")
            return
        loop = dict(state.get(LOOP) or {})
        if loop.get("finished") and state.get("task") == task and not _AGAIN.search(request_text(ctx)):
            yield say(ctx, self.name, "This session already finished: " + (state.get("result_summary") or ""))
            return
        if state.get("task") != task or not loop:
            loop = {"iteration": 0, "no_gain": 0, "history": [], "best": None, "judged": {}, "failed_steps": 0,
                    "elapsed_s": 0.0, "finished": False}
            # A session switching tasks must not feed the old task's plan, advice or result to the new one.
            stale = {k: None for k in _PER_TASK if state.get(k) is not None}
            yield say(ctx, self.name, f"Optimising {task}. Each kernel is compiled for the target chip, tested under "
                                      "the strict interpreter and judged by the sandboxed harness.",
                      {**stale, **session_setup(ctx, task), LOOP: loop, "ledger": []})
        else:
            # Unfinished from here on: a resumed run stopped mid-way must resume again, not report "finished".
            loop["finished"] = False
            yield say(ctx, self.name, f"Resuming {task} at iteration {loop['iteration'] + 1}.", {LOOP: loop})
        s = get_settings()
        started = time.monotonic()
        agents = {a.name: a for a in self.sub_agents}

        while True:
            if self._should_stop(loop, ctx, s, started):
                break
            it = loop["iteration"] + 1
            yield say(ctx, self.name, f"Iteration {it}: planning.",
                      {"iteration": it, "debug_round": 0, "debug_history": [], "reask": "", "last_tune": None})
            outcome = {"iteration": it, "ok": False, "note": "", "status": "not run", "speedup": None,
                       "rank_speedup": None, "rank_label": ""}
            verdict = None
            failed = None
            async for item in self._step(ctx, agents["planner"]):
                if isinstance(item, StepFailed):
                    failed = item
                else:
                    yield item
            if failed is None:
                async for item in self._implement(ctx, agents["implementer"]):
                    if isinstance(item, Event):
                        yield item
                    else:
                        failed = item
            if failed is None:
                ok, note = False, ""
                async for item in self._debug_until_clean(ctx, agents, s):
                    if isinstance(item, Event):
                        yield item
                    else:
                        ok, note = item
                outcome.update(ok=ok, note=note[:300])
                if ok:
                    verdict = await self._judge(state, loop)
            else:
                outcome["note"] = str(failed)[:300]
                loop["failed_steps"] = loop.get("failed_steps", 0) + 1
                yield say(ctx, self.name, f"Iteration {it}: {failed}; moving on (the best kernel so far stays).")
            improved = False
            if verdict is not None:
                outcome.update(status=verdict["status"], speedup=verdict["speedup"],
                               rank_speedup=verdict["rank_speedup"], rank_label=verdict["rank_label"])
                if verdict["status"] == "correct" and not verdict.get("repeat") and self._beats(verdict, loop):
                    improved = True
                    loop["best"] = await self._keep_best(ctx, state, it, verdict)
            loop["history"] = loop["history"] + [outcome]
            loop["no_gain"] = 0 if improved else loop["no_gain"] + 1
            loop["iteration"] = it  # a run stopped from here on resumes at the next iteration
            summary = verdict["summary"] if verdict else self._failed_summary(outcome["note"])
            ledger = list(state.get("ledger") or []) + [attempts.ledger_line(
                it, attempts.idea(state.get("plan")), self._outcome_text(verdict, outcome["note"], improved))]
            yield say(ctx, self.name, f"Iteration {it}: {summary}" + (" New best." if improved else ""),
                      {LOOP: loop, "verdict_summary": summary, "best_summary": self._best_summary(loop.get("best")),
                       "ledger": ledger, "best_kernel": self._best_kernel(loop.get("best"))})
            if verdict is not None and verdict["status"] == "correct":
                async for item in self._step(ctx, agents["profiler"]):
                    if not isinstance(item, StepFailed):
                        yield item
                if self._declares_tunables(state):
                    async for item in self._tune(ctx, agents["autotuner"], loop, it):
                        if isinstance(item, Event):
                            yield item
                        elif item:
                            loop["no_gain"] = 0
            loop["elapsed_s"] = loop.get("elapsed_s", 0.0) + (time.monotonic() - started)
            started = time.monotonic()
            yield say(ctx, self.name, "", {LOOP: loop})

        async for ev in self._finish(ctx, loop, s):
            yield ev

    # -- steps --------------------------------------------------------------------------------------------
    async def _step(self, ctx, agent):
        """A sub-agent's events; an exception (a model that gave up after its retries, anything else) becomes one
        StepFailed item and a recorded fault instead of ending the run."""
        try:
            async for ev in agent.run_async(ctx):
                yield ev
        except Exception as exc:  # noqa: BLE001 - the loop outlives any one step
            failed = StepFailed(agent.name, exc)
            yield self._fault(ctx, "step_failed", "counted as a failed step; the loop moved on", role=agent.name,
                              message=one_line(str(exc), 200))
            yield failed

    def _fault(self, ctx, kind: str, handled: str, **where) -> Event:
        state = ctx.session.state
        faults = list(state.get(FAULTS_KEY) or []) + [{"kind": kind, "iteration": state.get("iteration"), **where,
                                                       "handled": handled}]
        return say(ctx, self.name, "", {FAULTS_KEY: faults})

    async def _implement(self, ctx, agent):
        """The implementer's turn, checked: a kernel file really written and parseable. A turn without one is
        re-asked once with the reason; a second miss yields StepFailed."""
        state = ctx.session.state
        kernel = Path(state["workspace"]) / "kernel.py"
        for attempt in (1, 2):
            wrote, said, failed = False, False, None
            async for item in self._step(ctx, agent):
                if isinstance(item, StepFailed):
                    failed = item
                    continue
                wrote = wrote or any(r.name == "write_file" and "bytes" in (r.response or {})
                                     and str((r.response or {}).get("path", "")).strip("./") == "kernel.py"
                                     for r in item.get_function_responses())
                said = said or (item.author == agent.name and bool(item.content) and any(
                    p.text and p.text.strip() for p in item.content.parts or []) and not item.get_function_calls())
                yield item
            if failed is not None:
                yield failed
                return
            problem = attempts.check_written(kernel, wrote, said)
            if problem is None:
                yield say(ctx, self.name, "", {"reask": ""})
                return
            kind, reason = problem
            if attempt == 1:
                yield self._fault(ctx, kind, "re-asked once with the reason", role=agent.name, message=reason)
                yield say(ctx, self.name, f"The implementer's answer was not usable ({reason}); asking again.",
                          {"reask": reason})
            else:
                yield self._fault(ctx, kind, "counted as a failed step after one re-ask", role=agent.name,
                                  message=reason)
                yield say(ctx, self.name, "", {"reask": ""})
                yield StepFailed(agent.name, RuntimeError(f"no usable kernel after a re-ask: {reason}"))

    async def _debug_until_clean(self, ctx, agents, s):
        """Compile, then strict tests; on failure hand the output (mapped to kernel lines) to the debugger, at
        most max_debug_rounds times."""
        from maxkernel.tools.compile_pallas import compile_pallas
        from maxkernel.tools.run_tests import run_tests

        state = ctx.session.state
        kernel = Path(state["workspace"]) / "kernel.py"
        history: list[dict] = []
        for round_ in range(s.max_debug_rounds + 1):
            problem = attempts.check_written(kernel, kernel.is_file(), False)
            if problem is not None:
                problem = problem[1]
            else:
                comp = await asyncio.to_thread(compile_pallas, state["task"], str(kernel), state["chip"], "full")
                if not comp.ok:
                    problem = f"compile_kernel for {state['chip']} failed:\n{comp.summary}\n{comp.error or ''}"[:3000]
                else:
                    test = await asyncio.to_thread(run_tests, state["task"], str(kernel), state["size"])
                    if test.ok:
                        yield say(ctx, self.name, f"Compiles for {state['chip']} and passes the tests: {test.summary}",
                                  {"debug_round": 0, "last_error": ""})
                        yield (True, test.summary)
                        return
                    problem = f"test_kernel failed:\n{test.summary}"[:3000]
                problem = attempts.with_locations(problem, kernel)
            if round_ == s.max_debug_rounds:
                yield say(ctx, self.name, "", {"debug_round": 0})
                yield (False, problem)
                return
            yield say(ctx, self.name, f"Debug round {round_ + 1}: {one_line(problem, 300)}",
                      {"last_error": problem, "debug_round": round_ + 1, "debug_history": history})
            async for item in self._step(ctx, agents["debugger"]):
                if not isinstance(item, StepFailed):
                    yield item
            history = history + [{"round": round_ + 1, "error_class": attempts.error_class(problem),
                                  "note": one_line(state.get("debug_note"), 200)}]

    async def _judge(self, state, loop) -> dict:
        """The harness's verdict on kernel.py as a small dict; a source judged before is not judged again (its
        earlier verdict is reused and marked `repeat`, so a stale file never counts as a new result)."""
        from maxkernel.harness.verdict.evaluate import shared_evaluator

        kernel = Path(state["workspace"]) / "kernel.py"
        key = attempts.fingerprint(kernel)
        judged = dict(loop.get("judged") or {})
        if key in judged:
            return {**judged[key], "repeat": True,
                    "summary": f"same source as iteration {judged[key]['iteration']}: {judged[key]['summary']}"}
        v = await asyncio.to_thread(shared_evaluator().evaluate, state["task"], kernel, size=state["size"])
        rank, rank_label = v.rank
        out = {"iteration": state.get("iteration"), "status": v.status, "speedup": v.speedup, "rank_speedup": rank,
               "rank_label": rank_label, "summary": self._verdict_summary(v)}
        judged[key] = out
        loop["judged"] = judged
        return out

    @staticmethod
    def _beats(verdict: dict, loop: dict) -> bool:
        best = loop.get("best")
        # Keep-best by the rank speedup: the estimated TPU speedup off a TPU, measured time on one.
        return best is None or (verdict["rank_speedup"] or 0) > (best.get("rank_speedup", best.get("speedup")) or 0)

    @staticmethod
    def _declares_tunables(state) -> bool:
        from maxkernel.tools.autotune import declared_tunables

        try:
            return bool(declared_tunables((Path(state["workspace"]) / "kernel.py").read_text())[0])
        except (OSError, SyntaxError, ValueError):
            return False

    async def _tune(self, ctx, agent, loop, it):
        """The autotuner's search, then the loop's own write-back: the best configuration goes into kernel.py's
        defaults and the tuned file is judged by the harness before it can become the best kernel. Yields events,
        then whether the tuned file became the best."""
        from maxkernel.tools.autotune import declared_tunables, with_defaults

        state = ctx.session.state
        kernel = Path(state["workspace"]) / "kernel.py"
        async for item in self._step(ctx, agent):
            if not isinstance(item, StepFailed):
                yield item
        tune = state.get("last_tune") or {}
        config = tune.get("config") or {}
        try:
            source = kernel.read_text()
            defaults = declared_tunables(source)[1]
            if config and any(defaults.get(k) != v for k, v in config.items()):
                kernel.write_text(with_defaults(source, config))
        except (OSError, SyntaxError, ValueError) as exc:
            yield say(ctx, self.name, f"Could not write the tuned values into kernel.py: {one_line(str(exc))}")
            yield False
            return
        verdict = await self._judge(state, loop)
        if verdict.get("repeat"):  # nothing changed since the last verdict: nothing new to judge
            yield False
            return
        cfg = ", ".join(f"{k}={v}" for k, v in config.items())
        improved = verdict["status"] == "correct" and self._beats(verdict, loop)
        if improved:
            loop["best"] = await self._keep_best(ctx, state, it, verdict, tuned=config)
        ledger = list(state.get("ledger") or []) + [attempts.ledger_line(
            it, f"autotuned {cfg}", self._outcome_text(verdict, "", improved))]
        yield say(ctx, self.name, f"Iteration {it}, tuned ({cfg}): {verdict['summary']}" +
                  (" New best." if improved else ""),
                  {LOOP: loop, "ledger": ledger, "verdict_summary": verdict["summary"],
                   "best_summary": self._best_summary(loop.get("best")),
                   "best_kernel": self._best_kernel(loop.get("best"))})
        yield improved

    async def _keep_best(self, ctx, state, it, verdict, tuned: dict | None = None) -> dict:
        ws = Path(state["workspace"])
        shutil.copyfile(ws / "kernel.py", ws / "best_kernel.py")
        source = (ws / "best_kernel.py").read_text()
        version = await save_text_artifact(ctx, "best_kernel.py", source)
        remember_proven(state["task"], source, verdict["summary"])  # for retrieval in later sessions
        return {"iteration": it, "path": str(ws / "best_kernel.py"), "speedup": verdict["speedup"],
                "rank_speedup": verdict["rank_speedup"], "rank_label": verdict["rank_label"],
                "status": verdict["status"], "artifact_version": version, "tuned": tuned or None,
                "summary": verdict["summary"][:300]}

    # -- stopping and the answer --------------------------------------------------------------------------
    @staticmethod
    def _should_stop(loop, ctx, s, started) -> str | None:
        usage = ctx.session.state.get(USAGE_KEY) or {}
        best = loop.get("best") or {}
        elapsed = loop.get("elapsed_s", 0.0) + (time.monotonic() - started)
        tokens = usage.get("tokens", 0)
        if loop["iteration"] >= s.max_iterations:
            return f"iteration budget ({s.max_iterations}) used"
        if s.target_speedup and (best.get("rank_speedup", best.get("speedup")) or 0) >= s.target_speedup:
            return f"target speedup {s.target_speedup}x reached"
        if best and loop["no_gain"] >= s.patience:
            return f"{s.patience} iterations without a faster kernel"
        if s.max_tokens and tokens >= s.max_tokens:
            return f"token budget ({s.max_tokens}) used"
        if s.max_cost_usd:
            if usage.get("priced", True) and usage.get("cost_usd", 0.0) >= s.max_cost_usd:
                return f"cost budget (${s.max_cost_usd}) used"
            # An unpriced model's cost is unknown: the budget is enforced in tokens instead of never firing.
            budget = int(s.max_cost_usd / s.unpriced_usd_per_mtok * 1e6)
            if not usage.get("priced", True) and tokens >= budget:
                return (f"cost budget (${s.max_cost_usd}) used as a token budget ({budget} tokens at "
                        f"${s.unpriced_usd_per_mtok}/M: {', '.join(usage.get('unpriced_models') or [])} has no price)")
        if s.max_wall_s and elapsed >= s.max_wall_s:
            return f"wall-time budget ({s.max_wall_s:.0f} s) used"
        return None

    async def _finish(self, ctx, loop, s):
        from maxkernel.harness.verdict.evaluate import shared_evaluator

        state = ctx.session.state
        reason = self._should_stop(loop, ctx, s, time.monotonic()) or "stopped"
        best = loop.get("best")
        result = {"status": "failed", "kernel": None, "verdict": None, "iterations": loop["iteration"],
                  "stop_reason": reason, "failed_steps": loop.get("failed_steps", 0)}
        if best:
            seeds = list(range(s.heldout_seed_base, s.heldout_seed_base + s.eval_seeds))
            final = await asyncio.to_thread(shared_evaluator().evaluate, state["task"], best["path"],
                                            size=state["size"], seeds=seeds)
            verdict = final.model_dump(mode="json")
            result.update(status="correct" if final.status == "correct" else "failed_heldout",
                          kernel=best["path"], verdict=verdict, tuned=best.get("tuned"))
            text = (f"Done ({reason}). Best kernel: {best['path']} from iteration {best['iteration']}, "
                    f"re-judged on held-out seeds {final.correctness.seeds or seeds} (drawn fresh by the harness): "
                    f"{final.status.upper()} — {final.reason}; {estimate_text(verdict)}")
        else:
            text = f"Done ({reason}) without a kernel the harness judged correct."
        loop["finished"] = True
        yield say(ctx, self.name, text, {LOOP: loop, "result": result, "result_summary": text})

    # -- texts ----------------------------------------------------------------------------------------------
    @staticmethod
    def _verdict_summary(verdict) -> str:
        s = f"harness verdict {verdict.status.upper()}: {verdict.reason[:300]}"
        if verdict.speedup is not None:
            s += f"; {verdict.speedup:.3g}x vs baseline ({'CPU interpreter time' if 'cpu_timing' in verdict.flags else verdict.backend})"
        est = verdict.estimate or {}
        if est.get("ok"):
            s += (f"; TPU estimate on {est['chip']}: {est['speedup_estimate']:.3g}x, {est['bound']}-bound at "
                  f"{(est.get('fraction_of_roofline') or 0):.0%} of roofline (estimated, not measured)")
        elif est:
            s += f"; no TPU estimate ({(est.get('error') or '')[:120]})"
        return s

    @staticmethod
    def _failed_summary(note: str) -> str:
        return f"no kernel passed compile and tests ({one_line(note) or 'no detail'})"

    @staticmethod
    def _outcome_text(verdict: dict | None, note: str, improved: bool) -> str:
        if verdict is None:
            return f"failed before judging: {attempts.error_class(note)} ({one_line(note, 90)})"
        if verdict.get("repeat"):
            return f"same kernel as iteration {verdict['iteration']} ({verdict['status']}): no new information"
        if verdict["status"] != "correct":
            return f"{verdict['status']}: {one_line(verdict['summary'], 120)}"
        rank = verdict["rank_speedup"]
        text = f"correct, {rank:.3g}x ({verdict['rank_label'] or 'measured'})" if rank is not None else "correct"
        return text + ("; new best" if improved else "; not faster than the best")

    @staticmethod
    def _best_summary(best) -> str:
        if not best:
            return "none yet"
        rank = best.get("rank_speedup", best.get("speedup"))
        label = best.get("rank_label") or "measured"
        return f"iteration {best['iteration']}: {rank:.3g}x, {label} (harness: correct)" if rank is not None else \
            f"iteration {best['iteration']} (harness: correct)"

    def _best_kernel(self, best) -> dict | None:
        if not best:
            return None
        try:
            source = Path(best["path"]).read_text()
        except OSError:
            return None
        return {"source": source, "iteration": best["iteration"],
                "summary": f"iteration {best['iteration']}" + (" (tuned)" if best.get("tuned") else "")
                           + f", harness: correct; {self._best_summary(best)}"}
