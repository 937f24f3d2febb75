"""Each algorithm, driven by the controller over synthetic kernels: finds the best, is seeded, keeps its shape."""

from __future__ import annotations

from pathlib import Path

import pytest
from _fakes import FakeExecutor, FakeProducer

from maxkernel.search.algorithms import Beam, Evolve
from maxkernel.search.controller import Controller, run_search
from maxkernel.search.graph import Graph

SHAPES = {
    "parallel": ({"parallel": {"runs": 2, "depth": 3}}, 6),
    "beam": ({"beam": {"width": 2, "branches": 2, "depth": 3}}, 12),
    "evolve": ({"evolve": {"islands": 2, "population": 2, "generations": 3, "migration_interval": 1}}, 12),
}


def _run(out, config, algorithm, seed=0, **kw):
    options, _ = SHAPES[algorithm]
    return run_search(out, config(algorithm, seed=seed, **options), producer=FakeProducer(),
                      executor=FakeExecutor(), **kw)


@pytest.mark.parametrize("algorithm", sorted(SHAPES))
def test_algorithm_returns_its_best_correct_kernel(tmp_path, config, algorithm):
    result = _run(tmp_path, config, algorithm)
    g = Graph(tmp_path)
    nodes = g.nodes()
    assert len(nodes) == SHAPES[algorithm][1] and all(n.status == "done" for n in nodes)
    correct = [n for n in nodes if n.correct]
    best = max(correct, key=lambda n: (n.speedup, -n.id))
    assert result["status"] == "correct" and result["best"]["node"] == best.id
    assert result["stop_reason"].startswith(f"{algorithm} finished")
    assert Path(result["best"]["kernel"]).read_text() == best.source
    assert {n.verdict for n in nodes} - {"correct", "compile_error", "incorrect"} == set()
    assert best.depth > 1  # the search improved on its first kernels
    assert (tmp_path / "graph.html").is_file() and (tmp_path / "result.json").is_file()


@pytest.mark.parametrize("algorithm", sorted(SHAPES))
def test_same_seed_same_graph_other_seed_other_choices(tmp_path, config, algorithm):
    shape = lambda d: [(n.gen, n.parent, n.strategy, n.island) for n in Graph(d).nodes()]
    _run(tmp_path / "a", config, algorithm, seed=3)
    _run(tmp_path / "b", config, algorithm, seed=3)
    _run(tmp_path / "c", config, algorithm, seed=4)
    assert shape(tmp_path / "a") == shape(tmp_path / "b")
    assert shape(tmp_path / "a") != shape(tmp_path / "c")


def test_beam_expands_only_its_kept_kernels(tmp_path, config):
    _run(tmp_path, config, "beam")
    g = Graph(tmp_path)
    nodes = g.nodes()
    algo = Beam(Controller(tmp_path).config)
    for gen in (1, 2):
        beam = {n.id for n in algo.beam(gen, [n for n in nodes if n.gen < gen])}
        parents = {n.parent for n in nodes if n.gen == gen}
        assert parents == beam and 0 < len(beam) <= 2
        # "improvements": every kept kernel is correct and no slower than any correct kernel left out
        kept = [g.node(i) for i in beam]
        assert all(n.correct for n in kept)


def test_evolve_migrates_and_keeps_a_diverse_archive(tmp_path, config):
    _run(tmp_path, config, "evolve")
    nodes = Graph(tmp_path).nodes()
    by_id = {n.id: n for n in nodes}
    crossed = [n for n in nodes if n.parent is not None and by_id[n.parent].island != n.island]
    assert crossed, "with migration every generation, some child breeds from a migrant"
    algo = Evolve(Controller(tmp_path).config)
    archive = algo.archive(3, nodes)
    keys = [(n.family or n.strategy, int(2 * __import__("math").log2(n.speedup))) for n in archive]
    assert len(keys) == len(set(keys)) and all(n.correct for n in archive)


def test_parallel_runs_stay_independent(tmp_path, config):
    _run(tmp_path, config, "parallel")
    nodes = Graph(tmp_path).nodes()
    by_id = {n.id: n for n in nodes}
    assert sorted({n.island for n in nodes}) == [0, 1]
    assert all(by_id[n.parent].island == n.island for n in nodes if n.parent is not None)
