"""Steering a search from the search app: its tools on a real graph, and the app through a real ADK Runner
with a scripted model that decides from the person's last message."""

from __future__ import annotations

import pytest

import re
from collections.abc import AsyncGenerator
from pathlib import Path

from _fakes import FakeExecutor, FakeProducer
from google.adk import Runner
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.sessions import InMemorySessionService
from google.genai import types

from maxkernel.evals.judging import find_kernel
from maxkernel.search.controller import run_search
from maxkernel.search.graph import Graph
from maxkernel.search.render import render_html

pytestmark = pytest.mark.unit

BEAM = {"beam": {"width": 2, "branches": 2, "depth": 3}}


def _reply(*parts) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=list(parts)),
                       usage_metadata=types.GenerateContentResponseUsageMetadata(
                           prompt_token_count=10, candidates_token_count=5, total_token_count=15))


class ScriptedLlm(BaseLlm):
    """Maps "open DIR", "frontier", "show N", "pin N", "prune N", "idea NAME: TEXT" to the tool calls."""

    model: str = "scripted"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        responses = [p.function_response for p in last.parts or [] if p.function_response]
        if responses:
            body = responses[-1].response or {}
            yield _reply(types.Part(text=str(body.get("summary"))))
            return
        text = " ".join(p.text for p in last.parts or [] if p.text)
        rules = [(r"open (\S+)", lambda m: ("open_search", {"out_dir": m[1]})),
                 (r"frontier", lambda m: ("show_frontier", {})),
                 (r"show (\d+)", lambda m: ("show_node", {"node_id": int(m[1])})),
                 (r"unpin (\d+)", lambda m: ("pin_node", {"node_id": int(m[1]), "pinned": False})),
                 (r"pin (\d+)", lambda m: ("pin_node", {"node_id": int(m[1])})),
                 (r"prune (\d+)", lambda m: ("prune_branch", {"node_id": int(m[1])})),
                 (r"idea (\S+): (.+)", lambda m: ("add_strategy", {"name": m[1], "text": m[2]}))]
        for pattern, call in rules:
            m = re.search(pattern, text)
            if m:
                name, args = call(m)
                yield _reply(types.Part(function_call=types.FunctionCall(name=name, args=args)))
                return
        yield _reply(types.Part(text="Which search?"))


async def _say(runner, session_id, text) -> tuple[str, list[dict]]:
    said, results = [], []
    msg = types.Content(role="user", parts=[types.Part(text=text)])
    async for ev in runner.run_async(user_id="u", session_id=session_id, new_message=msg):
        results += [dict(r.response or {}) for r in ev.get_function_responses()]
        said += [p.text for p in (ev.content.parts if ev.content else []) or [] if p.text]
    return "\n".join(said), results


async def test_a_person_steers_a_search_through_the_app(tmp_path, config, replay_env):
    from maxkernel.apps.search.agent import build

    run_search(tmp_path, config("beam", limits={"max_nodes": 4}, **BEAM), producer=FakeProducer(),
               executor=FakeExecutor())
    g = Graph(tmp_path)
    correct = sorted((n for n in g.nodes() if n.correct), key=lambda n: -n.speedup)
    failed = next(n for n in g.nodes() if not n.correct)
    runner = Runner(app=App(name="search", root_agent=build(ScriptedLlm())), session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="search", user_id="u")

    text, _ = await _say(runner, session.id, "frontier")
    assert "No search is open" in text
    text, [res] = await _say(runner, session.id, f"open {tmp_path}")
    assert res["ok"] and "Frontier: #" in text and {r["id"] for r in res["frontier"]} == {n.id for n in correct[:2]}
    # The finished search ends with the auto app's machine-readable line: the eval metrics find its kernel.
    result = Graph(tmp_path).meta("result")["best"]
    kernel = find_kernel([text])
    assert kernel == result["kernel"] and Path(kernel).read_text() == Graph(tmp_path).node(result["node"]).source
    assert f"from iteration {Graph(tmp_path).node(result['node']).depth} (node {result['node']}," in text
    _, [res] = await _say(runner, session.id, f"show {correct[0].id}")
    assert res["ok"] and res["detail"]["children"] == [] and "Technique to apply" in res["detail"]["strategy_text"]
    _, [res] = await _say(runner, session.id, f"pin {failed.id}")
    assert not res["ok"] and "only a kernel the harness judged correct" in res["summary"]
    _, [res] = await _say(runner, session.id, f"pin {correct[-1].id}")
    assert res["ok"] and Graph(tmp_path).node(correct[-1].id).pinned
    _, [res] = await _say(runner, session.id, f"prune {correct[0].id}")
    assert res["detail"]["pruned"] == [correct[0].id] and correct[0].id not in {r["id"] for r in res["frontier"]}
    _, [res] = await _say(runner, session.id, "idea bad!name: fuse it all together")
    assert not res["ok"]
    _, [res] = await _say(runner, session.id, "idea fuse-twice: Fuse both passes into one kernel body.")
    assert res["ok"] and [s["name"] for s in Graph(tmp_path).strategies()] == ["fuse-twice"]

    # The live search picks the changes up when it plans its next generation.
    run_search(tmp_path, config("beam", limits={"max_nodes": 8}, **BEAM), producer=FakeProducer(),
               executor=FakeExecutor())
    gen1 = Graph(tmp_path).generation(1)
    assert correct[0].id not in {n.parent for n in gen1} and correct[-1].id in {n.parent for n in gen1}
    assert {n.strategy for n in gen1} >= {"fuse-twice"}


def test_graph_picture_colours_verdicts_and_labels_speedups(tmp_path, config):
    run_search(tmp_path, config("beam", limits={"max_nodes": 6}, **BEAM), producer=FakeProducer(),
               executor=FakeExecutor())
    g = Graph(tmp_path)
    page = render_html(g, "beam search")
    assert page.startswith("<!doctype html>") and "<svg" in page and "<script" not in page
    timed = [n for n in g.nodes() if n.speedup is not None]
    assert timed and len(timed) < len(g.nodes())  # some kernels have a speedup to label, some failed
    assert all(f">{n.id}</text>" in page for n in g.nodes())
    assert all(f">{n.speedup:.2f}x</text>" in page for n in timed)
    assert "#2e9d4f" in page  # correct kernels are green
    assert page.count("<line ") == len(g.nodes())  # one edge per node (to its parent or the task)
    assert (tmp_path / "graph.html").read_text().count("<circle") == len(g.nodes())
