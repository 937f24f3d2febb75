"""What a real model does to a run, one fault at a time, in process: retries, timeouts, tools that never raise,
sloppy chip names, unusable files, error locations, budgets. Each runs through the real ADK Runner where an
agent is involved."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from google.adk import Agent, Runner
from google.adk.apps import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.sessions import InMemorySessionService
from google.genai import errors, types

from maxkernel import chips
from maxkernel.agents.guard import ToolGuardPlugin
from maxkernel.agents.resilience import RETRY_KEY, ModelCallError, ResilientLlm, is_transient
from maxkernel.agents.roots import attempts
from maxkernel.agents.usage import FAULTS_KEY, USAGE_KEY, UsagePlugin
from maxkernel.tools.autotune import declared_tunables, with_defaults

pytestmark = pytest.mark.unit

KERNELS = Path(__file__).resolve().parents[2] / "maxkernel" / "agents" / "replay" / "kernels"


class Scripted(BaseLlm):
    """A model double: each call takes the next item of `script`: an exception to raise, "hang", or an answer."""

    model: str = "gemini-2.5-flash"
    script: list = []
    calls: int = 0

    async def generate_content_async(self, llm_request, stream=False):
        self.calls += 1
        item = self.script.pop(0) if self.script else "done"
        if isinstance(item, BaseException):
            raise item
        if item == "hang":
            await asyncio.sleep(60)
        if isinstance(item, types.Content):
            content = item
        else:
            content = types.Content(role="model", parts=[types.Part(text=str(item))])
        yield LlmResponse(content=content, usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=100, candidates_token_count=10, thoughts_token_count=40,
            cached_content_token_count=60))


def call(name, **args) -> types.Content:
    return types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name=name, args=args))])


def wrap(inner, **kw) -> ResilientLlm:
    kw = {"attempts": 4, "initial_delay_s": 0.01, "max_delay_s": 0.05, "timeout_s": 0.5, **kw}
    return ResilientLlm(model=inner.model, inner=inner, **kw)


async def run_agent(model, tools=(), state=None):
    agent = Agent(name="worker", model=model, instruction="work", tools=list(tools))
    app = App(name="faults", root_agent=agent, plugins=[UsagePlugin(), ToolGuardPlugin()])
    runner = Runner(app=app, session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService())
    session = await runner.session_service.create_session(app_name="faults", user_id="u", state=state or {})
    message = types.Content(role="user", parts=[types.Part(text="go")])
    events = [e async for e in runner.run_async(user_id="u", session_id=session.id, new_message=message)]
    session = await runner.session_service.get_session(app_name="faults", user_id="u", session_id=session.id)
    return events, session.state


def quota() -> errors.ClientError:
    return errors.ClientError(429, {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "quota",
                                              "details": [{"retryDelay": "0.02s"}]}})


# -- retries, backoff, timeouts ------------------------------------------------------------------------------
async def test_429_503_and_a_hang_are_retried_and_counted():
    inner = Scripted(script=[quota(), errors.ServerError(503, {"error": {"message": "overloaded"}}), "hang", "ok"])
    events, state = await run_agent(wrap(inner))
    assert inner.calls == 4
    usage = state[USAGE_KEY]
    assert usage["llm_calls"] == 1 and usage["retries"] == 3
    assert [f["kind"] for f in state[FAULTS_KEY]] == ["http_429", "http_503", "timeout"]
    assert all(f["handled"].startswith("retried after") for f in state[FAULTS_KEY])
    assert any(p.text == "ok" for e in events if e.content for p in e.content.parts)


async def test_a_server_retry_delay_is_honoured():
    inner = Scripted(script=[quota(), "ok"])
    model = wrap(inner, initial_delay_s=5.0, max_delay_s=5.0)  # a fixed backoff would wait 2.5-5 s
    chunks = [r async for r in model.generate_content_async(_request())]
    assert chunks[-1].custom_metadata[RETRY_KEY][0]["wait_s"] == 0.02


async def test_attempts_exhausted_or_not_transient_raise_one_clear_error():
    model = wrap(Scripted(script=[quota()] * 5), attempts=3)
    with pytest.raises(ModelCallError, match=r"gave up after attempt 3/3: http_429"):
        [r async for r in model.generate_content_async(_request())]
    inner = Scripted(script=[errors.ClientError(400, {"error": {"message": "bad request"}}), "ok"])
    with pytest.raises(ModelCallError, match="not retryable"):
        [r async for r in wrap(inner).generate_content_async(_request())]
    assert inner.calls == 1  # a 400 is the request's fault: asking again would not help


def test_transient_classification():
    assert is_transient(quota()) and is_transient(asyncio.TimeoutError()) and is_transient(ConnectionResetError())
    assert not is_transient(errors.ClientError(400, {"error": {}})) and not is_transient(ValueError("x"))

    class RateLimitError(Exception):  # LiteLLM's exception names, without its package
        pass

    assert is_transient(RateLimitError())


def test_provider_retries_are_switched_off_and_a_transport_timeout_set():
    request = _request()
    wrap(Scripted(), timeout_s=30)._prepare(request)
    http = request.config.http_options
    assert http.retry_options.attempts == 1 and http.timeout == 35_000


def _request():
    from google.adk.models.llm_request import LlmRequest

    return LlmRequest(contents=[types.Content(role="user", parts=[types.Part(text="hi")])],
                      config=types.GenerateContentConfig())


# -- usage: thought and cached tokens, unpriced models ----------------------------------------------------------
async def test_thought_and_cached_tokens_are_counted_and_priced(caplog):
    _, state = await run_agent(wrap(Scripted(script=["ok"])))
    usage = state[USAGE_KEY]
    assert (usage["prompt_tokens"], usage["output_tokens"], usage["thought_tokens"], usage["cached_tokens"]) == \
        (100, 10, 40, 60)
    assert usage["tokens"] == 150 and usage["prompt_tokens_per_call"] == [100]
    assert usage["cost_usd"] == pytest.approx((100 * 0.30 + 50 * 2.50) / 1e6)  # thoughts billed as output
    with caplog.at_level(logging.WARNING, logger="maxkernel.usage"):
        for _ in range(2):
            _, state = await run_agent(wrap(Scripted(model="my-own-llm", script=["ok"])))
    assert state[USAGE_KEY]["unpriced_models"] == ["my-own-llm"] and not state[USAGE_KEY]["priced"]
    assert sum("my-own-llm" in r.message for r in caplog.records) <= 1  # warned once per process


def test_max_cost_becomes_a_token_budget_for_an_unpriced_model(replay_env):
    from maxkernel.agents.roots.auto import AutoOrchestrator

    s = replay_env(max_cost_usd=0.01, unpriced_usd_per_mtok=10)  # $0.01 at $10/M = 1000 tokens

    class Ctx:
        class session:
            state = {USAGE_KEY: {"tokens": 999, "priced": False, "cost_usd": 0.0, "unpriced_models": ["x"]}}

    loop = {"iteration": 1, "no_gain": 0, "best": None}
    assert AutoOrchestrator._should_stop(loop, Ctx, s, 0.0) is None or "wall" in AutoOrchestrator._should_stop(
        loop, Ctx, s, 0.0)
    Ctx.session.state[USAGE_KEY]["tokens"] = 1000
    assert "token budget (1000 tokens" in AutoOrchestrator._should_stop(loop, Ctx, s, __import__("time").monotonic())


# -- tools never raise into the runner --------------------------------------------------------------------------
def exploding_tool(x: int) -> dict:
    """A tool that crashes.

    Args:
        x: anything.
    """
    raise RuntimeError("the job died")


async def test_a_raising_tool_a_made_up_tool_and_missing_arguments_come_back_as_error_results():
    script = [call("exploding_tool", x=1), call("no_such_tool"), call("exploding_tool"), "finished"]
    events, state = await run_agent(wrap(Scripted(script=script)), tools=[exploding_tool])
    results = [dict(r.response) for e in events for r in e.get_function_responses()]
    assert [r["status"] for r in results] == ["error", "error", "error"]
    assert [r["error_kind"] for r in results] == ["tool_crashed", "unknown_tool", "malformed_tool_call"]
    assert "the job died" in results[0]["message"] and results[0]["hint"]
    assert "exploding_tool" in results[1]["message"]  # the tools there are, named for the model
    assert [f["kind"] for f in state[FAULTS_KEY]] == ["tool_crashed", "unknown_tool", "malformed_tool_call"]
    assert any(p.text == "finished" for e in events if e.content for p in e.content.parts)  # the run went on


@pytest.mark.parametrize("written, name", [("TPU v5e", "v5e"), ("v5litepod", "v5e"), ("tpu-v6e", "v6e"),
                                           ("v5p-8", "v5p"), ("TPU v4", "v4"), ("TPU v6 lite", "v6e"),
                                           ("Trillium", "v6e"), ("tpu7x", "7x"), ("v5e", "v5e")])
def test_chips_are_read_leniently(written, name):
    assert chips.get(written).name == name


def test_an_unknown_chip_lists_the_valid_names():
    with pytest.raises(ValueError, match="valid chips: v4, v5e, v5p, v6e, 7x"):
        chips.get("tpu v9z")


async def test_session_tools_answer_a_bad_chip_and_a_missing_file(tmp_path):
    from maxkernel.tools import session_tools

    script = [call("compile_kernel", chip="tpu v9z"), call("compile_kernel", path="nope.py"),
              call("tune_kernel", max_configs="lots"), "done"]
    (tmp_path / "kernel.py").write_text("def workload(x):\n    return x\n")
    state = {"task": "12p_RMSNorm", "size": "smoke", "chip": "v5e", "workspace": str(tmp_path)}
    events, state = await run_agent(wrap(Scripted(script=script)), state=state,
                                    tools=[session_tools.compile_kernel, session_tools.tune_kernel])
    results = [dict(r.response) for e in events for r in e.get_function_responses()]
    assert results[0]["status"] == "error" and "v4, v5e, v5p, v6e, 7x" in results[0]["hint"]
    assert results[1]["error_kind"] == "missing_file"
    assert results[2]["status"] == "error" and "whole number" in results[2]["message"]


# -- the loop's checks on what a turn wrote ---------------------------------------------------------------------
def test_check_written(tmp_path):
    kernel = tmp_path / "kernel.py"
    assert attempts.check_written(kernel, False, True)[0] == "prose_answer"
    assert attempts.check_written(kernel, False, False)[0] == "no_write"
    source = (KERNELS / "12p_RMSNorm_v2.py").read_text()
    kernel.write_text(source[: len(source) // 2])
    kind, reason = attempts.check_written(kernel, True, False)
    assert kind == "truncated_file" and "cut off" in reason
    kernel.write_text("x = 1\n")
    assert attempts.check_written(kernel, True, False)[0] == "no_workload"
    kernel.write_text(source)
    assert attempts.check_written(kernel, True, False) is None


def test_errors_are_mapped_to_kernel_lines(tmp_path):
    kernel = tmp_path / "kernel.py"
    kernel.write_text((KERNELS / "12p_RMSNorm_v1.py").read_text())
    lowering = ("ValueError: The Pallas TPU lowering currently requires that the last two dimensions of your block "
                f"shape are divisible by 8 and 128 ... in pallas_call _kernel at {kernel}:11 has block shape ...")
    traceback = f'Traceback:\n  File "/sandbox/job/kernel.py", line 26, in workload\n    in_specs=...'
    out = attempts.with_locations(lowering + "\n" + traceback, kernel)
    assert "kernel.py:11: def _kernel(x_ref, s_ref, o_ref):" in out
    assert "kernel.py:26: in_specs=[pl.BlockSpec((rows, d)" in out
    assert attempts.error_class(lowering) == "block shape rule"


def test_tuned_values_are_written_into_the_defaults_and_nothing_else():
    source = (KERNELS / "12p_RMSNorm_v1_fixed.py").read_text()
    tuned = with_defaults(source, {"rows": 128})
    assert declared_tunables(tuned)[1] == {"rows": 128}
    changed = [(a, b) for a, b in zip(source.splitlines(), tuned.splitlines()) if a != b]
    assert changed == [("def workload(x, scale, *, rows=64):", "def workload(x, scale, *, rows=128):")]
    with pytest.raises(ValueError, match="no keyword default for cols"):
        with_defaults(source, {"cols": 8})


# -- scoped instructions ----------------------------------------------------------------------------------------
def test_instructions_never_raise_on_an_empty_state_and_carry_the_ledger_and_best_kernel():
    from maxkernel.agents.sub_agents import debugger, implementer, planner

    class Ctx:
        state: dict = {}

    for module in (planner, implementer, debugger):
        assert "Task: (none chosen yet)" in module.prompt.instruction(Ctx)
    Ctx.state = {"task": "12p_RMSNorm", "iteration": 2, "ledger": [f"iteration {i}: idea {i} -> failed" for i in range(20)],
                 "best_kernel": {"source": "def workload(x):\n    return x\n", "summary": "iteration 1, correct"},
                 "plan": "1. tile rows", "last_error": "boom at kernel.py:3",
                 "debug_history": [{"round": 1, "error_class": "compile error", "note": "changed rows"}]}
    text = planner.prompt.instruction(Ctx)
    assert "iteration 19: idea 19 -> failed" in text and "iteration 0: idea" not in text  # newest 12, counted rest
    assert "(8 older attempts not shown)" in text and "def workload(x):" in text
    assert "def workload(x):" in implementer.prompt.instruction(Ctx)
    debug = debugger.prompt.instruction(Ctx)
    assert "boom at kernel.py:3" in debug and "round 1: error compile error; you said: changed rows" in debug
    assert "1. tile rows" in debug


# -- a step that fails for good does not end the run ------------------------------------------------------------
async def test_a_model_that_stays_down_fails_its_steps_and_the_run_still_finishes(replay_env, sqlite_store, drive):
    replay_env(max_iterations=2)
    runner = sqlite_store.runner()
    planner = next(a for a in runner.app.root_agent.sub_agents if a.name == "planner")
    planner.model = wrap(Scripted(script=[quota()] * 20), attempts=2)
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    events = await drive(runner, session.id, "optimize 12p_RMSNorm")
    state = (await runner.session_service.get_session(app_name=runner.app_name, user_id="u",
                                                      session_id=session.id)).state
    assert state["result"]["status"] == "failed" and state["result"]["failed_steps"] == 2
    assert state["result"]["stop_reason"] == "iteration budget (2) used"
    failed = [f for f in state[FAULTS_KEY] if f["kind"] == "step_failed"]
    assert [f["role"] for f in failed] == ["planner", "planner"] and "gave up after attempt 2/2" in failed[0]["message"]
    said = [p.text for e in events if e.author == "maxkernel_auto" and e.content for p in e.content.parts if p.text]
    assert any("planner step failed" in t and "moving on" in t for t in said)
    assert len(state["ledger"]) == 2 and "failed before judging" in state["ledger"][0]
