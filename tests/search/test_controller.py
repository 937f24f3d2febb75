"""The controller over synthetic kernels: budgets, resume after a crash, the memo, held-out fallback, limits,
and a person's steering reaching the next generation."""

from __future__ import annotations

import pytest
from _fakes import FakeExecutor, FakeProducer

from maxkernel.search.config import ConfigMismatch
from maxkernel.search.controller import Controller, SearchError, run_search
from maxkernel.search.evaluator import Cascade
from maxkernel.search.graph import Graph

pytestmark = pytest.mark.unit

BEAM = {"beam": {"width": 2, "branches": 2, "depth": 3}}


class Crash(BaseException):
    """Stands for the process dying mid-node: escapes every `except Exception`."""


def _finished(folder):
    return {n.id: (n.finished, n.source_sha, n.verdict) for n in Graph(folder).nodes() if n.status == "done"}


@pytest.mark.parametrize("limit, expect", [
    ({"max_nodes": 5}, "node budget (5) used"),
    ({"max_tokens": 250, "workers": 1}, "token budget (250) used"),
    ({"max_cost_usd": 0.02, "workers": 1}, "cost budget ($0.02) used"),
    ({"max_wall_s": 0.5, "workers": 1}, "wall-time budget (0.5 s) used"),
])
def test_budgets_stop_the_search_and_a_larger_budget_resumes_it(tmp_path, config, limit, expect):
    producer = FakeProducer(delay=0.3 if "max_wall_s" in limit else 0.0)
    result = run_search(tmp_path, config("beam", limits=limit, **BEAM), producer=producer, executor=FakeExecutor())
    assert result["stop_reason"] == expect
    done = _finished(tmp_path)
    assert 0 < len(done) < 12 and result["status"] == "correct"
    # Same folder, the budget raised: finished nodes are kept as they were and never produced again.
    more = config("beam", limits={"max_nodes": 50, "workers": 1}, **BEAM)
    again = FakeProducer()
    result = run_search(tmp_path, more, producer=again, executor=FakeExecutor())
    assert result["stop_reason"] == "beam finished after 3 generations"
    assert not set(again.calls) & set(done)
    after = _finished(tmp_path)
    assert {k: after[k] for k in done} == done and len(after) == 12


def test_a_crash_mid_node_resumes_without_redoing_finished_nodes(tmp_path, config):
    producer = FakeProducer()
    producer.crash_on = {3: Crash()}
    c = config("beam", limits={"workers": 1}, **BEAM)
    with pytest.raises(Crash):
        run_search(tmp_path, c, producer=producer, executor=FakeExecutor())
    g = Graph(tmp_path)
    statuses = [n.status for n in g.nodes()]
    assert statuses[:3] == ["done", "done", "running"] and statuses[3] in ("done", "pending")
    before = _finished(tmp_path)
    executor, fresh = FakeExecutor(), FakeProducer()
    result = Controller(tmp_path, None, producer=fresh, executor=executor).run()  # resume from the folder alone
    assert fresh.calls[0] == 3 and not set(fresh.calls) & set(before)
    assert {k: _finished(tmp_path)[k] for k in before} == before
    assert result["status"] == "correct" and len(Graph(tmp_path).nodes()) == 12


def test_a_failing_node_is_recorded_and_the_search_goes_on(tmp_path, config):
    producer = FakeProducer()
    producer.crash_on = {2: RuntimeError("model quota exceeded")}
    result = run_search(tmp_path, config("beam", **BEAM), producer=producer, executor=FakeExecutor())
    node = Graph(tmp_path).node(2)
    assert node.verdict == "failed" and "model quota exceeded" in node.note
    assert result["status"] == "correct"


def test_cascade_memo_is_shared_persisted_and_scoped(tmp_path, config):
    g = Graph(tmp_path)
    ex = FakeExecutor()
    src = "# speed: 1.25\n"
    cas = Cascade(config("beam"), g, ex)
    assert cas.evaluate(src).speedup == 1.25 and cas.evaluate(src).correct
    assert ex.calls == ["compile", "interpret", "timing"]
    Cascade(config("beam"), g, ex).evaluate(src)  # a new process: read back from the database
    assert len(ex.calls) == 3
    bad = cas.evaluate("# speed: 1\n# fails: compile\n")
    assert (bad.verdict, bad.stage, bad.speedup) == ("compile_error", "compile", None)
    assert ex.calls[-1] == "compile"  # the cascade stopped at the first failing stage
    nodedup = Cascade(config("beam", dedupe=False), g, ex)
    nodedup.evaluate(src, nodedup.scope(7))
    nodedup.evaluate(src, nodedup.scope(8))
    assert len(ex.calls) == 4 + 6


def test_heldout_failure_falls_back_to_the_next_best(tmp_path, config):
    run_search(tmp_path / "a", config("beam", **BEAM), producer=FakeProducer(), executor=FakeExecutor())
    first = Graph(tmp_path / "a").totals()["best"]
    result = run_search(tmp_path / "b", config("beam", **BEAM), producer=FakeProducer(heldout_fail={first}),
                        executor=FakeExecutor())
    assert [t["node"] for t in result["heldout_tried"]][0] == first
    assert result["heldout_tried"][0]["status"] == "incorrect"
    assert result["status"] == "correct" and result["best"]["node"] != first


def test_resume_refuses_another_scoreboard_and_needs_a_config_to_start(tmp_path, config):
    run_search(tmp_path, config("beam", limits={"max_nodes": 2}, **BEAM), producer=FakeProducer(),
               executor=FakeExecutor())
    with pytest.raises(ConfigMismatch, match="seed"):
        Controller(tmp_path, config("beam", seed=9, **BEAM), producer=FakeProducer(), executor=FakeExecutor())
    with pytest.raises(SearchError, match="no search"):
        Controller(tmp_path / "empty")


def test_model_and_device_limits_are_separate(tmp_path, config):
    producer, executor = FakeProducer(delay=0.2), FakeExecutor(delay=0.05)
    run_search(tmp_path, config("beam", limits={"workers": 4, "eval_workers": 1}, **BEAM), producer=producer,
               executor=executor)
    assert producer.peak >= 2  # nodes overlapped their (model) work
    assert executor.device_peak == 1  # while one device judged one kernel at a time


def test_steering_reaches_the_next_generation(tmp_path, config):
    c = config("beam", limits={"max_nodes": 4}, **BEAM)
    run_search(tmp_path, c, producer=FakeProducer(), executor=FakeExecutor())
    g = Graph(tmp_path)
    gen0 = sorted((n for n in g.nodes() if n.correct), key=lambda n: -n.speedup)
    best, other = gen0[0], gen0[-1]
    g.prune(best.id)
    g.set_pinned(other.id)
    g.add_strategy("my-idea", "Try the person's idea on every parent.")
    more = config("beam", limits={"max_nodes": 8}, **BEAM)
    run_search(tmp_path, more, producer=FakeProducer(), executor=FakeExecutor())
    gen1 = Graph(tmp_path).generation(1)
    parents = {n.parent for n in gen1}
    assert best.id not in parents and other.id in parents
    assert [n.strategy for n in gen1 if n.parent == other.id][0] == "my-idea"  # a person's idea goes first
