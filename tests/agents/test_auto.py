"""The autonomous policy end to end: real ADK Runner, SQLite sessions, file artifacts, the replay model, real tools."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest

from maxkernel.settings import get_settings
from maxkernel.tools.autotune import with_defaults

ROOT = "maxkernel_auto"
SUB_AGENTS = {"planner", "implementer", "debugger", "tester", "profiler", "autotuner", "explainer"}


def recorded_kernel(name: str) -> str:
    return (resources.files("maxkernel.agents.replay") / "kernels" / name).read_text()


def texts(events, author=None) -> list[str]:
    return [p.text for e in events if e.content and (author is None or e.author == author)
            for p in e.content.parts or [] if p.text]


def calls(events, name, author=None) -> list:
    return [fc for e in events if author is None or e.author == author for fc in e.get_function_calls()
            if fc.name == name]


def responses(events, name) -> list[dict]:
    return [dict(fr.response or {}) for e in events for fr in e.get_function_responses() if fr.name == name]


def deltas(events, key) -> list:
    return [e.actions.state_delta[key] for e in events if key in (e.actions.state_delta or {})]


def model_turns(events) -> int:
    """Events that are a model's answer (text or tool calls), i.e. one per LLM call."""
    return sum(1 for e in events if e.author in SUB_AGENTS and not e.get_function_responses()
               and e.content and any(p.text or p.function_call for p in e.content.parts or []))


async def new_session(runner, session_id=None):
    return await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id=session_id)


async def load_session(runner, session_id):
    return await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=session_id)


def cli_evaluate(task: str, kernel: str) -> dict:
    """The CLI's independent verdict on `kernel`, in a process of its own."""
    proc = subprocess.run([sys.executable, "-m", "maxkernel.cli", "evaluate", "--task", task, "--kernel", kernel,
                           "--json"], check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


async def run_to_end(sqlite_store, drive, task):
    runner = sqlite_store.runner()
    session = await new_session(runner)
    events = await drive(runner, session.id, f"optimize {task}")
    return runner, await load_session(runner, session.id), events


def check_run(session, events, fixed_kernel, reason="iteration budget (1) used", by_estimate=False):
    """What every successful one-iteration run must show: fixed by the debugger, judged, kept, counted."""
    state = session.state
    said = texts(events, ROOT)
    assert any(t.startswith("Debug round 1:") for t in said), said
    written = calls(events, "write_file")
    assert [c.args["content"] for c in calls(events, "write_file", "debugger")] == [fixed_kernel]
    assert len(written) == 2  # the implementer's broken kernel, then the debugger's fix
    assert any(t.startswith("Compiles for v5e and passes the tests") for t in said), said
    assert [(h["iteration"], h["ok"], h["status"]) for h in state["loop"]["history"]] == [(1, True, "correct")]
    assert any(t.startswith("Iteration 1: harness verdict CORRECT") for t in said), said

    # The profiler and the autotuner ran their tools for real on the judged kernel.
    profile = responses(events, "profile_kernel")
    assert len(profile) == 1 and profile[0]["ok"] and profile[0]["kernel_ms"] > 0, profile
    tune = responses(events, "tune_kernel")
    assert len(tune) == 1 and tune[0]["ok"] and tune[0]["tried"], tune
    outcomes = sorted(t["outcome"] for t in tune[0]["tried"])
    if by_estimate:  # every configuration that compiles is estimated; the best estimate that is correct wins
        assert outcomes.count("best") == 1 and set(outcomes) <= {"best", "estimated", "pruned"}, tune[0]["tried"]
    else:
        assert outcomes == ["best", "timed"], tune[0]["tried"]  # max_configs 2
    assert not [t for t in texts(events) if "no recorded" in t]  # every role found its recorded turn

    result = state["result"]
    assert result["status"] == "correct", result
    assert result["verdict"]["status"] == "correct"
    assert result["iterations"] == 1 and result["stop_reason"] == reason
    best = Path(result["kernel"])
    # The debugger's fix, or that file with the autotuner's values written into its defaults (then re-judged).
    expected = with_defaults(fixed_kernel, result["tuned"]) if result.get("tuned") else fixed_kernel
    assert best.name == "best_kernel.py" and best.read_text() == expected
    assert best.parent == Path(state["workspace"])
    assert said[-1].startswith(f"Done ({reason})") and "CORRECT" in said[-1]
    # Kept for retrieval in later sessions, under the user's data folder.
    proven = sorted((get_settings().data_dir / "proven" / Path(state["task"]).name).glob("*.py"))
    assert any(p.read_text().endswith(best.read_text()) for p in proven), proven

    usage = state["usage"]
    assert usage["llm_calls"] == model_turns(events) == 9  # planner 1, then 2 each: call + closing note
    assert usage["tokens"] == usage["prompt_tokens"] + usage["output_tokens"] > 0
    assert usage["cost_usd"] == 0.0 and usage["priced"] and set(usage["by_model"]) == {"replay"}
    return best


async def check_artifacts(runner, session, best: Path):
    kw = {"app_name": runner.app_name, "user_id": "u", "session_id": session.id}
    saved = await runner.artifact_service.load_artifact(filename="best_kernel.py", **kw)
    assert saved is not None and saved.text == best.read_text()
    assert await runner.artifact_service.list_versions(filename="kernel.py", **kw) == [0, 1]


@pytest.mark.integration
@pytest.mark.slow
async def test_gemm_missing_init_fixed_and_token_budget_stops(replay_env, sqlite_store, drive):
    # Two iterations allowed, but the token budget is used up by the first: the loop must stop there.
    replay_env(max_iterations=2, patience=1, max_tokens=5000)
    runner, session, events = await run_to_end(sqlite_store, drive, "8p_GEMM")
    errors = [e for e in deltas(events, "last_error") if e]
    assert len(errors) == 1 and errors[0].startswith("test_kernel failed"), errors
    assert "NaN/Inf values" in errors[0] and "never initialised" in errors[0], errors[0]
    best = check_run(session, events, recorded_kernel("8p_GEMM_v1_fixed.py"), "token budget (5000) used")
    assert session.state["usage"]["tokens"] >= 5000
    await check_artifacts(runner, session, best)
    assert cli_evaluate("8p_GEMM", str(best))["status"] == "correct"


def said_first(prefix: str):
    """Stop a run once the orchestrator says something starting with `prefix`."""
    return lambda e: e.author == ROOT and any(t.startswith(prefix) for t in texts([e]))


@pytest.mark.integration
@pytest.mark.slow
async def test_stopped_session_resumes_where_it_stopped(replay_env, sqlite_store, drive):
    replay_env(max_iterations=2, patience=1)
    runner = sqlite_store.runner()
    sid = (await new_session(runner)).id
    # The client goes away right after iteration 1's verdict, before the profiler runs.
    first = await drive(runner, sid, "optimize 12p_RMSNorm", until=said_first("Iteration 1: harness verdict"))
    state = (await load_session(runner, sid)).state
    assert state["loop"]["iteration"] == 1 and not state["loop"]["finished"] and "result" not in state
    assert state["loop"]["best"]["iteration"] == 1 and not responses(first, "profile_kernel")

    # A new Runner, app and session service over the same SQLite file, as a new process would build them.
    runner = sqlite_store.runner()
    second = await drive(runner, sid, "continue")
    said = texts(second, ROOT)
    assert said[0] == "Resuming 12p_RMSNorm at iteration 2.", said
    plans = texts(second, "planner")
    assert len(plans) == 1 and "raise the default row block to 128" in plans[0]  # the iteration-2 turn
    assert [c.args["content"] for c in calls(second, "write_file")] == [recorded_kernel("12p_RMSNorm_v2.py")]
    assert not any(t.startswith("Debug round") for t in said)
    state = (await load_session(runner, sid)).state
    assert [(h["iteration"], h["status"]) for h in state["loop"]["history"]] == [(1, "correct"), (2, "correct")]
    result = state["result"]
    assert result["iterations"] == 2 and result["stop_reason"] == "iteration budget (2) used"
    assert result["status"] == "correct"
    kept = recorded_kernel({1: "12p_RMSNorm_v1_fixed.py", 2: "12p_RMSNorm_v2.py"}[state["loop"]["best"]["iteration"]])
    assert Path(result["kernel"]).read_text() == (with_defaults(kept, result["tuned"]) if result.get("tuned") else kept)
    assert state["usage"]["llm_calls"] == model_turns(first) + model_turns(second)

    # Finished: the same request only reports; no agent runs.
    third = await drive(sqlite_store.runner(), sid, "optimize 12p_RMSNorm")
    assert [e.author for e in third] == [ROOT]
    assert texts(third)[0].startswith("This session already finished: Done (iteration budget (2) used)")

    # "again" with a larger budget continues at iteration 3 (not 1); stopped there, it resumes again later.
    replay_env(max_iterations=3)
    fourth = await drive(sqlite_store.runner(), sid, "optimize 12p_RMSNorm again", until=said_first("Resuming"))
    assert texts(fourth, ROOT) == ["Resuming 12p_RMSNorm at iteration 3."]
    runner = sqlite_store.runner()
    assert not (await load_session(runner, sid)).state["loop"]["finished"]
    fifth = await drive(runner, sid, "continue", until=lambda e: e.author == ROOT)
    assert texts(fifth, ROOT) == ["Resuming 12p_RMSNorm at iteration 3."]

    # Another task in the same session starts fresh, without the old task's plan, advice or result.
    sixth = await drive(sqlite_store.runner(), sid, "optimize 8p_GEMM", until=lambda e: e.author == ROOT)
    assert texts(sixth, ROOT)[0].startswith("Optimising 8p_GEMM")
    state = (await load_session(runner, sid)).state
    assert state["task"] == "8p_GEMM" and state["loop"]["iteration"] == 0 and state["loop"]["best"] is None
    assert all(state.get(k) is None for k in ("plan", "advice", "result", "result_summary", "best_summary"))


async def _stop_reason(loop: dict, usage: dict | None = None, elapsed: float = 0.0, **limits):
    """What the orchestrator's stopping rule says for `loop`, read from a real session's state."""
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.sessions import InMemorySessionService

    from maxkernel.agents.roots.auto import AutoOrchestrator
    from maxkernel.settings import Settings

    service = InMemorySessionService()
    session = await service.create_session(app_name="auto", user_id="u", state={"usage": usage or {}})
    root = AutoOrchestrator(name=ROOT)
    ctx = InvocationContext(session_service=service, invocation_id="e-1", agent=root, session=session)
    # Every budget given here, so no MAXKERNEL_* variable of the caller's environment takes part.
    budgets = {"max_iterations": 100, "patience": 100, "target_speedup": None, "max_tokens": None,
               "max_cost_usd": None, "max_wall_s": None}
    settings = Settings(_env_file=None, **{**budgets, **limits})
    return root._should_stop({"no_gain": 0, "best": None, **loop}, ctx, settings, time.monotonic() - elapsed)


async def test_budgets_stop_the_loop():
    best = {"iteration": 1, "speedup": 1.5}
    assert await _stop_reason({"iteration": 1}, max_iterations=2) is None
    assert await _stop_reason({"iteration": 2}, max_iterations=2, patience=1) == "iteration budget (2) used"
    assert await _stop_reason({"iteration": 2, "no_gain": 1, "best": best}, max_iterations=3,
                              patience=1) == "1 iterations without a faster kernel"
    # Without a correct kernel yet, patience never ends the search: only the budgets do.
    assert await _stop_reason({"iteration": 2, "no_gain": 2}, max_iterations=3, patience=1) is None
    assert await _stop_reason({"iteration": 1, "best": best}, target_speedup=1.4) == "target speedup 1.4x reached"
    assert await _stop_reason({"iteration": 1, "best": best}, target_speedup=2.0) is None
    assert await _stop_reason({"iteration": 1}, {"tokens": 900}, max_tokens=900) == "token budget (900) used"
    assert await _stop_reason({"iteration": 1}, {"cost_usd": 0.5}, max_cost_usd=0.25) == "cost budget ($0.25) used"
    assert await _stop_reason({"iteration": 1, "elapsed_s": 50.0}, elapsed=20.0,
                              max_wall_s=60) == "wall-time budget (60 s) used"
    assert await _stop_reason({"iteration": 1, "elapsed_s": 10.0}, elapsed=20.0, max_wall_s=60) is None


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1500)
async def test_rmsnorm_broken_block_fixed_by_debugger_and_kept_by_the_tpu_estimate(replay_env, sqlite_store, drive):
    """The implementer's block breaks the (8, 128) rule; the debugger fixes it from the compiler's reason; the fix
    is judged, profiled, tuned and kept. With estimates on (the default outside the test suite), a CPU run ranks by
    the estimated TPU speedup, says so, and still reports the measured interpreter speedup beside it."""
    replay_env(max_iterations=1, estimate="true")
    runner, session, events = await run_to_end(sqlite_store, drive, "12p_RMSNorm")
    errors = [e for e in deltas(events, "last_error") if e]
    assert len(errors) == 1 and errors[0].startswith("compile_kernel for v5e failed"), errors
    assert "divisible by 8 and 128" in errors[0] and "block_size=100" in errors[0], errors[0]
    best_file = check_run(session, events, recorded_kernel("12p_RMSNorm_v1_fixed.py"), by_estimate=True)
    await check_artifacts(runner, session, best_file)
    assert cli_evaluate("12p_RMSNorm", str(best_file))["status"] == "correct"

    loop = session.state["loop"]
    entry, best = loop["history"][0], loop["best"]
    assert entry["status"] == "correct" and best["iteration"] == 1
    assert best["rank_label"].startswith("estimated TPU speedup on v5e"), best
    assert entry["rank_speedup"] != entry["speedup"]  # the estimate, not the CPU figure
    # The best is that kernel, or its tuned version when the harness judged the tuned file better by the estimate.
    assert best["rank_speedup"] == entry["rank_speedup"] if not best.get("tuned") else \
        best["rank_speedup"] > entry["rank_speedup"]
    summary = [s for s in deltas(events, "verdict_summary") if s][0]
    assert "CPU interpreter time" in summary and "TPU estimate on v5e" in summary and "estimated, not measured" in summary
    assert "estimated TPU speedup" in [s for s in deltas(events, "best_summary") if s][0]
    tune = responses(events, "tune_kernel")
    assert tune[0]["ok"] and "estimated TPU time" in tune[0]["timing_label"], tune
    assert any(t["estimated_ms"] for t in tune[0]["tried"]), tune[0]["tried"]
    final = session.state["result"]["verdict"]
    assert final["estimate"]["ok"] and final["estimate"]["chip"] == "v5e"
