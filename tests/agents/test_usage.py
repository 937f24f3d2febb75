"""The usage plugin: LLM calls, tokens and estimated dollars per session, counted through a real ADK Runner."""

from __future__ import annotations

import pytest
from google.adk import Agent, Runner
from google.adk.agents.callback_context import CallbackContext
from google.adk.apps import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.models.llm_response import LlmResponse
from google.adk.sessions import InMemorySessionService
from google.genai import types

from maxkernel.agents.replay import ReplayLlm
from maxkernel.agents.sub_agents import ROLES
from maxkernel.agents.usage import USAGE_KEY, UsagePlugin

pytestmark = pytest.mark.unit


async def run_one_agent(tmp_path, model: ReplayLlm):
    """One recorded implementer turn (a write_file call, then its closing note) in an app of its own."""
    app = App(name="usage", root_agent=ROLES["implementer"](model), plugins=[UsagePlugin()])
    runner = Runner(app=app, session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService())
    state = {"task": "12p_RMSNorm", "size": "smoke", "chip": "v5e", "iteration": 1, "workspace": str(tmp_path)}
    session = await runner.session_service.create_session(app_name="usage", user_id="u", state=state)
    message = types.Content(role="user", parts=[types.Part(text="implement the plan")])
    events = [e async for e in runner.run_async(user_id="u", session_id=session.id, new_message=message)]
    session = await runner.session_service.get_session(app_name="usage", user_id="u", session_id=session.id)
    return events, session.state[USAGE_KEY]


def reported(events) -> tuple[int, int, int]:
    """(calls, prompt tokens, output tokens) as the model's own responses reported them."""
    metas = [e.usage_metadata for e in events if e.usage_metadata is not None]
    return len(metas), sum(m.prompt_token_count for m in metas), sum(m.candidates_token_count for m in metas)


async def test_replay_calls_and_tokens_counted_at_no_cost(tmp_path):
    events, usage = await run_one_agent(tmp_path, ReplayLlm(role="implementer"))
    assert (tmp_path / "kernel.py").is_file()  # the recorded tool call ran
    calls, prompt, output = reported(events)
    assert calls == 2 and prompt > 0 and output > 0
    assert (usage["llm_calls"], usage["prompt_tokens"], usage["output_tokens"]) == (calls, prompt, output)
    assert usage["tokens"] == prompt + output
    assert usage["cost_usd"] == 0.0 and usage["priced"]
    assert usage["by_model"] == {"replay": {"llm_calls": 2, "tokens": prompt + output}}


async def test_priced_model_cost_through_a_run(tmp_path):
    # The replay turns, under a priced model's name: the plugin prices by the name the agent's model has.
    events, usage = await run_one_agent(tmp_path, ReplayLlm(role="implementer", model="gemini-2.5-flash"))
    _, prompt, output = reported(events)
    assert usage["priced"] and set(usage["by_model"]) == {"gemini-2.5-flash"}
    # gemini-2.5-flash: $0.30 in, $2.50 out per million tokens.
    assert usage["cost_usd"] == pytest.approx((prompt * 0.30 + output * 2.50) / 1e6, abs=2e-6)
    assert usage["cost_usd"] > 0


async def _context(model) -> CallbackContext:
    """A callback context over a real session and invocation, for an agent using `model`."""
    from google.adk.agents.invocation_context import InvocationContext

    service = InMemorySessionService()
    session = await service.create_session(app_name="usage", user_id="u")
    agent = Agent(name="worker", model=model)
    return CallbackContext(InvocationContext(session_service=service, invocation_id="e-1", agent=agent,
                                             session=session))


def _response(prompt: int, output: int, partial: bool = False) -> LlmResponse:
    return LlmResponse(partial=partial, usage_metadata=types.GenerateContentResponseUsageMetadata(
        prompt_token_count=prompt, candidates_token_count=output, total_token_count=prompt + output))


async def test_cost_arithmetic():
    plugin, ctx = UsagePlugin(), await _context("gemini-2.5-pro")
    await plugin.after_model_callback(callback_context=ctx, llm_response=_response(2_000_000, 100_000))
    await plugin.after_model_callback(callback_context=ctx, llm_response=_response(10, 10, partial=True))
    await plugin.after_model_callback(callback_context=ctx, llm_response=_response(1_000_000, 0))
    usage = ctx.state[USAGE_KEY]
    # gemini-2.5-pro: $1.25 in, $10 out per million tokens; the partial chunk is not a call.
    assert usage["cost_usd"] == pytest.approx(2 * 1.25 + 0.1 * 10.0 + 1 * 1.25)
    assert (usage["llm_calls"], usage["prompt_tokens"], usage["output_tokens"]) == (2, 3_000_000, 100_000)


async def test_unknown_model_is_marked_unpriced():
    plugin, ctx = UsagePlugin(), await _context(ReplayLlm(role="planner", model="some-local-model"))
    await plugin.after_model_callback(callback_context=ctx, llm_response=_response(1000, 1000))
    usage = ctx.state[USAGE_KEY]
    assert usage["llm_calls"] == 1 and usage["tokens"] == 2000
    assert usage["cost_usd"] == 0.0 and usage["priced"] is False
    assert usage["by_model"] == {"some-local-model": {"llm_calls": 1, "tokens": 2000}}


async def test_response_without_usage_metadata_still_counts_a_call():
    plugin, ctx = UsagePlugin(), await _context("gemini-2.5-flash")
    await plugin.after_model_callback(callback_context=ctx, llm_response=LlmResponse())
    usage = ctx.state[USAGE_KEY]
    assert usage["llm_calls"] == 1 and usage["tokens"] == 0 and usage["cost_usd"] == 0.0
