"""Searches end to end with the replay model: real ADK runners, real sub-agents and tools, the real sandboxed
harness. Each algorithm must return a kernel re-judged correct on held-out seeds."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from google.adk.models.base_llm import BaseLlm

from maxkernel.agents.resilience import ModelCallError
from maxkernel.search import Graph, make_config, run_search

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TASK = "12p_RMSNorm"
SHAPES = {"parallel": {"parallel": {"runs": 2, "depth": 2}},
          "beam": {"beam": {"width": 1, "branches": 2, "depth": 2}},
          "evolve": {"evolve": {"islands": 2, "population": 1, "generations": 2}}}


def cli_evaluate(kernel: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "maxkernel.cli", "evaluate", "--task", TASK, "--kernel", kernel,
                           "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("algorithm", sorted(SHAPES))
def test_algorithm_finds_a_correct_kernel_with_the_replay_model(tmp_path, replay_env, algorithm):
    events = []
    config = make_config(TASK, algorithm=algorithm, profile=False, limits={"max_nodes": 4}, **SHAPES[algorithm])
    result = run_search(tmp_path / "s", config, progress=events.append)
    nodes = Graph(tmp_path / "s").nodes()
    assert result["status"] == "correct", result
    assert len(nodes) == 4 and all(n.status == "done" for n in nodes)
    best = Graph(tmp_path / "s").node(result["best"]["node"])
    assert best.correct and result["best"]["speedup"] == max(n.speedup for n in nodes if n.correct)
    # The replay's first kernel is broken: the debugger's fix went through the cascade before the verdict.
    first = nodes[0]
    assert "Debug round 1" in first.note and first.tokens > 0 and first.llm_calls >= 4
    assert {n.depth for n in nodes} == {1, 2}  # children were built on their parents
    assert any(e["event"] == "node_finished" for e in events) and events[-1]["event"] == "final"
    verdict = json.loads((tmp_path / "s" / "best_verdict.json").read_text())
    assert verdict["status"] == "correct" and len(verdict["correctness"]["seeds"]) == len(config.heldout_seeds)
    assert verdict["correctness"]["seeds_drawn"] == "fresh"  # the held-out verdict runs on seeds nobody saw
    if algorithm == "beam":  # an independent process judges the returned kernel
        again = cli_evaluate(result["best"]["kernel"])
        assert again["status"] == "correct", again


def test_children_get_the_profilers_advice_on_their_parent(tmp_path, replay_env):
    config = make_config(TASK, algorithm="beam", profile=True, limits={"max_nodes": 2},
                         beam={"width": 1, "branches": 1, "depth": 2})
    result = run_search(tmp_path, config)
    parent, child = Graph(tmp_path).nodes()
    assert parent.advice and "[replay]" in parent.advice
    assert child.strategy == "profiler-advice" and parent.advice.strip()[:200] in child.strategy_text
    assert not child.advice  # the last generation is not profiled: nobody would use the advice
    assert result["status"] == "correct"


class _GaveUp(BaseLlm):
    """A model that fails every call, as a real endpoint does once its retries are spent."""

    model: str = "gave-up"

    async def generate_content_async(self, llm_request, stream=False):
        raise ModelCallError("the model kept answering 503 after 6 attempts")
        yield  # pragma: no cover - an async generator


def test_a_failing_profiler_does_not_cost_the_node_its_kernel(tmp_path, replay_env, monkeypatch):
    from maxkernel.agents import app as app_module

    real = app_module.build_pool

    def pool(model=None, **kw):
        agents = real(model, **kw)
        for a in agents:
            if a.name == "profiler":
                a.model = _GaveUp()
        return agents

    monkeypatch.setattr(app_module, "build_pool", pool)
    config = make_config(TASK, algorithm="beam", profile=True, limits={"max_nodes": 2},
                         beam={"width": 1, "branches": 1, "depth": 2})
    result = run_search(tmp_path, config)
    parent, child = Graph(tmp_path).nodes()
    assert parent.status == "done" and parent.correct, parent.note
    assert "profiler step failed" in parent.note and not parent.advice
    assert child.strategy != "profiler-advice"  # no advice to build on: the next strategy instead
    assert result["status"] == "correct"
