"""The autonomous policy: plan -> implement -> compile/debug -> test -> evaluate -> profile -> tune -> iterate.

The loop's control flow is code, not a model's choice: every gate is a real tool (compiler, strict tests,
the harness), and the answer is always the best kernel the harness judged correct, re-verified on held-out
seeds. Sub-agents do the creative steps. The loop's position lives in session state, so a stopped run
resumes at the iteration it was in.
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

from maxkernel.agentlib.root._common import find_task, one_line, request_text, save_text_artifact, say, session_setup
from maxkernel.agentlib.usage import USAGE_KEY
from maxkernel.settings import get_settings

__all__ = ["AutoOrchestrator"]

LOOP = "loop"  # state key: {iteration, no_gain, history, best, elapsed_s, finished}
# State the sub-agents read or the run reports that belongs to one task's loop.
_PER_TASK = ("plan", "advice", "best_summary", "verdict_summary", "last_error", "implementation_note", "debug_note",
             "tuning_note", "test_report", "result", "result_summary")

_AGAIN = re.compile(r"\bagain\b", re.I)  # "optimize X again" continues a finished session's loop


class AutoOrchestrator(BaseAgent):
    """Routes deterministically over the sub-agent pool; see the module docstring."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        state = ctx.session.state
        task = find_task(request_text(ctx)) or state.get("task")
        if not task:
            yield say(ctx, self.name, "Which task? Say e.g. 'optimize 12p_RMSNorm' (any jaxbench task name, "
                                      "or a folder with baseline.py).")
            return
        loop = dict(state.get(LOOP) or {})
        if loop.get("finished") and state.get("task") == task and not _AGAIN.search(request_text(ctx)):
            yield say(ctx, self.name, "This session already finished: " + (state.get("result_summary") or ""))
            return
        if state.get("task") != task or not loop:
            loop = {"iteration": 0, "no_gain": 0, "history": [], "best": None, "elapsed_s": 0.0, "finished": False}
            # A session switching tasks must not feed the old task's plan, advice or result to the new one.
            stale = {k: None for k in _PER_TASK if state.get(k) is not None}
            yield say(ctx, self.name, f"Optimising {task}. Each kernel is compiled for the target chip, tested under "
                                      "the strict interpreter and judged by the sandboxed harness.",
                      {**stale, **session_setup(ctx, task), LOOP: loop})
        else:
            # Unfinished from here on: a resumed run stopped mid-way must resume again, not report "finished".
            loop["finished"] = False
            yield say(ctx, self.name, f"Resuming {task} at iteration {loop['iteration'] + 1}.", {LOOP: loop})
        s = get_settings()
        started = time.monotonic()
        agents = {a.name: a for a in self.sub_agents}

        while True:
            stop = self._should_stop(loop, ctx, s, started)
            if stop:
                break
            it = loop["iteration"] + 1
            yield say(ctx, self.name, f"Iteration {it}: planning.", {"iteration": it, "debug_round": 0})
            async for ev in agents["planner"].run_async(ctx):
                yield ev
            async for ev in agents["implementer"].run_async(ctx):
                yield ev
            verdict = None
            ok, note = False, ""
            async for item in self._debug_until_clean(ctx, agents, s):
                if isinstance(item, Event):
                    yield item
                else:
                    ok, note = item
            if ok:
                verdict = await asyncio.to_thread(self._evaluate, state)
            rank, rank_label = verdict.rank if verdict else (None, "")
            entry = {"iteration": it, "ok": ok, "note": note[:300],
                     "status": verdict.status if verdict else "not run", "speedup": verdict.speedup if verdict else None,
                     "rank_speedup": rank, "rank_label": rank_label}
            improved = False
            if verdict is not None and verdict.status == "correct":
                best = loop.get("best")
                # Keep-best by the rank speedup: the estimated TPU speedup off a TPU, measured time on one.
                if best is None or (rank or 0) > (best.get("rank_speedup", best.get("speedup")) or 0):
                    improved = True
                    loop["best"] = await self._keep_best(ctx, state, it, verdict)
            loop["no_gain"] = 0 if improved else loop["no_gain"] + 1
            loop["iteration"] = it
            loop["history"] = loop["history"] + [entry]
            loop["elapsed_s"] = loop.get("elapsed_s", 0.0) + (time.monotonic() - started)
            started = time.monotonic()
            summary = self._verdict_summary(verdict, note)
            yield say(ctx, self.name, f"Iteration {it}: {summary}" + (" New best." if improved else ""),
                      {LOOP: loop, "verdict_summary": summary,
                       "best_summary": self._best_summary(loop.get("best"))})
            if verdict is not None and verdict.status == "correct":
                async for ev in agents["profiler"].run_async(ctx):
                    yield ev
                if self._declares_tunables(state):
                    async for ev in agents["autotuner"].run_async(ctx):
                        yield ev

        async for ev in self._finish(ctx, loop, s):
            yield ev

    # -- steps --------------------------------------------------------------------------------------------
    async def _debug_until_clean(self, ctx, agents, s):
        """Compile, then strict tests; on failure hand the output to the debugger, at most max_debug_rounds."""
        from maxkernel.tools.compile_pallas import compile_pallas
        from maxkernel.tools.run_tests import run_tests

        state = ctx.session.state
        kernel = Path(state["workspace"]) / "kernel.py"
        for round_ in range(s.max_debug_rounds + 1):
            if not kernel.is_file():
                problem = "kernel.py was not written: write the whole kernel file with write_file."
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
            if round_ == s.max_debug_rounds:
                yield say(ctx, self.name, "", {"debug_round": 0})
                yield (False, problem)
                return
            yield say(ctx, self.name, f"Debug round {round_ + 1}: {one_line(problem, 300)}",
                      {"last_error": problem, "debug_round": round_ + 1})
            async for ev in agents["debugger"].run_async(ctx):
                yield ev

    @staticmethod
    def _evaluate(state):
        from maxkernel.harness.evaluate import shared_evaluator

        kernel = Path(state["workspace"]) / "kernel.py"
        return shared_evaluator().evaluate(state["task"], kernel, size=state["size"])

    @staticmethod
    def _declares_tunables(state) -> bool:
        from maxkernel.tools.autotune import declared_tunables

        try:
            return bool(declared_tunables((Path(state["workspace"]) / "kernel.py").read_text())[0])
        except (OSError, SyntaxError, ValueError):
            return False

    async def _keep_best(self, ctx, state, it, verdict) -> dict:
        ws = Path(state["workspace"])
        shutil.copyfile(ws / "kernel.py", ws / "best_kernel.py")
        source = (ws / "best_kernel.py").read_text()
        version = await save_text_artifact(ctx, "best_kernel.py", source)
        rank, rank_label = verdict.rank
        return {"iteration": it, "path": str(ws / "best_kernel.py"), "speedup": verdict.speedup,
                "rank_speedup": rank, "rank_label": rank_label, "status": verdict.status, "artifact_version": version}

    # -- stopping and the answer --------------------------------------------------------------------------
    @staticmethod
    def _should_stop(loop, ctx, s, started) -> str | None:
        usage = ctx.session.state.get(USAGE_KEY) or {}
        best = loop.get("best") or {}
        elapsed = loop.get("elapsed_s", 0.0) + (time.monotonic() - started)
        if loop["iteration"] >= s.max_iterations:
            return f"iteration budget ({s.max_iterations}) used"
        if s.target_speedup and (best.get("rank_speedup", best.get("speedup")) or 0) >= s.target_speedup:
            return f"target speedup {s.target_speedup}x reached"
        if best and loop["no_gain"] >= s.patience:
            return f"{s.patience} iterations without a faster kernel"
        if s.max_tokens and usage.get("tokens", 0) >= s.max_tokens:
            return f"token budget ({s.max_tokens}) used"
        if s.max_cost_usd and usage.get("cost_usd", 0.0) >= s.max_cost_usd:
            return f"cost budget (${s.max_cost_usd}) used"
        if s.max_wall_s and elapsed >= s.max_wall_s:
            return f"wall-time budget ({s.max_wall_s:.0f} s) used"
        return None

    async def _finish(self, ctx, loop, s):
        from maxkernel.harness.evaluate import shared_evaluator

        state = ctx.session.state
        reason = self._should_stop(loop, ctx, s, time.monotonic()) or "stopped"
        best = loop.get("best")
        result = {"status": "failed", "kernel": None, "verdict": None, "iterations": loop["iteration"],
                  "stop_reason": reason}
        if best:
            seeds = list(range(s.heldout_seed_base, s.heldout_seed_base + s.eval_seeds))
            final = await asyncio.to_thread(shared_evaluator().evaluate, state["task"], best["path"],
                                            size=state["size"], seeds=seeds)
            result.update(status="correct" if final.status == "correct" else "failed_heldout",
                          kernel=best["path"], verdict=final.model_dump(mode="json"))
            text = (f"Done ({reason}). Best kernel: {best['path']} from iteration {best['iteration']}, "
                    f"re-judged on held-out seeds {final.correctness.seeds or seeds} (drawn fresh by the harness): "
                    f"{final.status.upper()} — {final.reason}")
        else:
            text = f"Done ({reason}) without a kernel the harness judged correct."
        loop["finished"] = True
        yield say(ctx, self.name, text, {LOOP: loop, "result": result, "result_summary": text})

    @staticmethod
    def _verdict_summary(verdict, note: str) -> str:
        if verdict is None:
            return f"no kernel passed compile and tests ({one_line(note) or 'no detail'})"
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
    def _best_summary(best) -> str:
        if not best:
            return "none yet"
        rank = best.get("rank_speedup", best.get("speedup"))
        label = best.get("rank_label") or "measured"
        return f"iteration {best['iteration']}: {rank:.3g}x, {label} (harness: correct)" if rank is not None else \
            f"iteration {best['iteration']} (harness: correct)"
