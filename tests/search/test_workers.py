"""The limits plugin through a real ADK Runner: each model call holds a model slot, device tools a device slot,
and the debugger's compile_kernel/test_kernel are answered by the search's (memoised) cascade."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from _fakes import FakeExecutor
from google.adk import Agent, Runner
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.sessions import InMemorySessionService
from google.genai import types

from maxkernel.search.evaluator import Cascade
from maxkernel.search.graph import Graph
from maxkernel.search.workers import SEARCH_KEY, LimitsPlugin, SearchContext, Slots, register, unregister
from maxkernel.tools import session_tools


class CallsTools(BaseLlm):
    """Calls compile_kernel, then test_kernel, then answers with text."""

    model: str = "calls-tools"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        done = [p.function_response.name for c in llm_request.contents for p in c.parts or [] if p.function_response]
        nxt = next((t for t in ("compile_kernel", "test_kernel") if t not in done), None)
        part = (types.Part(function_call=types.FunctionCall(name=nxt, args={})) if nxt
                else types.Part(text="checked"))
        yield LlmResponse(content=types.Content(role="model", parts=[part]),
                          usage_metadata=types.GenerateContentResponseUsageMetadata(
                              prompt_token_count=1, candidates_token_count=1, total_token_count=2))


async def test_plugin_routes_debugger_tools_through_the_cascade_and_counts_slots(tmp_path, config):
    executor = FakeExecutor()
    slots = Slots(model=1, device=1)
    cascade = Cascade(config("beam"), Graph(tmp_path / "g"), executor, slots.device_slot)
    key = register(SearchContext(cascade, slots, cascade.config))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "kernel.py").write_text("# speed: 1.5\n")
    agent = Agent(name="debugger", model=CallsTools(), instruction="fix it",
                  tools=[session_tools.compile_kernel, session_tools.test_kernel])
    runner = Runner(app=App(name="search", root_agent=agent, plugins=[LimitsPlugin()]),
                    session_service=InMemorySessionService())
    try:
        session = await runner.session_service.create_session(
            app_name="search", user_id="u", state={SEARCH_KEY: key, "workspace": str(ws), "task": "12p_RMSNorm",
                                                   "chip": "v5e", "size": "smoke"})
        responses = {}
        async for ev in runner.run_async(user_id="u", session_id=session.id,
                                         new_message=types.Content(role="user", parts=[types.Part(text="go")])):
            responses.update({r.name: dict(r.response or {}) for r in ev.get_function_responses()})
    finally:
        unregister(key)
    assert responses["compile_kernel"]["summary"] == "synthetic compile"
    assert responses["test_kernel"]["summary"] == "synthetic test"
    assert executor.calls == ["compile", "interpret"]  # the real tools (sandboxed harness) never ran
    assert slots.peak == {"model": 1, "device": 1}  # three model calls, one at a time; one device stage
    assert cascade.check("# speed: 1.5\n").ok and executor.calls == ["compile", "interpret"]  # memoised
