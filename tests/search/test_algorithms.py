"""Each algorithm, driven by the controller over synthetic kernels: finds the best, is seeded, keeps its shape."""

from __future__ import annotations

from pathlib import Path

import pytest
from _fakes import FakeExecutor, FakeProducer

from maxkernel.search.algorithms import Beam, Evolve
from maxkernel.search.controller import Controller, run_search
from maxkernel.search.graph import Graph

pytestmark = pytest.mark.unit

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


# The beam run of _run(seed=0) as (id, generation, parent, speedup). A synthetic kernel's speed is
# 0.5 + 0.25 * depth + (sum of its strategy name's code points % 7) / 100 (see _fakes.py): first-version,
# grid-order and profiler-advice add 0.06, deeper-pipeline 0.02, fuse-epilogue 0.01; fewer-relayouts fails its
# test and vmem-budget its compile (None). Which strategies appear is the seeded sampler's choice.
BEAM_GRAPH = [
    (1, 0, None, 0.81), (2, 0, None, 0.81), (3, 0, None, None), (4, 0, None, None),
    (5, 1, 1, 1.06), (6, 1, 1, 1.02), (7, 1, 2, 1.06), (8, 1, 2, 1.01),
    (9, 2, 5, 1.31), (10, 2, 5, 1.27), (11, 2, 7, 1.31), (12, 2, 7, 1.31),
]
# Width 2, keep="improvements": generation 1 expands the two correct first kernels (1 and 2; 3 and 4 failed).
# Generation 2 picks the best two of the kept kernels and the children that beat their parent: 5 and 7 (1.06,
# the tie broken by id) ahead of 6 (1.02), 8 (1.01) and the parents 1 and 2 (0.81).
BEAM_KEPT = {1: {1, 2}, 2: {5, 7}}


def test_beam_expands_only_its_kept_kernels(tmp_path, config):
    _run(tmp_path, config, "beam")
    nodes = Graph(tmp_path).nodes()
    assert [(n.id, n.gen, n.parent, n.speedup) for n in nodes] == BEAM_GRAPH
    algo = Beam(Controller(tmp_path).config)
    for gen, kept in BEAM_KEPT.items():
        assert {n.parent for n in nodes if n.gen == gen} == kept
        assert {n.id for n in algo.beam(gen, [n for n in nodes if n.gen < gen])} == kept


def test_evolve_migrates_and_keeps_a_diverse_archive(tmp_path, config):
    _run(tmp_path, config, "evolve")
    nodes = Graph(tmp_path).nodes()
    by_id = {n.id: n for n in nodes}
    crossed = [n for n in nodes if n.parent is not None and by_id[n.parent].island != n.island]
    assert crossed, "with migration every generation, some child breeds from a migrant"
    # The archive after generation 2 holds the best kernel per (technique family, floor(2 log2 speedup)) cell,
    # best first. In this seed-0 run the correct kernels are 10, 11, 12 (profile, 1.31), 5, 9 (profile, 1.06),
    # 6 (tiling, 1.06), 8 (memory, 1.02), 1 (baseline, 0.81) and 4 (layout, 0.75): speedups above 1 fall in
    # band 0, the two below in band -1, so the profile family keeps only 10.
    assert {n.id: (n.family, n.speedup) for n in nodes if n.correct} == {
        1: ("baseline", 0.81), 4: ("layout", 0.75), 5: ("profile", 1.06), 6: ("tiling", 1.06),
        8: ("memory", 1.02), 9: ("profile", 1.06), 10: ("profile", 1.31), 11: ("profile", 1.31),
        12: ("profile", 1.31)}
    archive = Evolve(Controller(tmp_path).config).archive(3, nodes)
    assert [n.id for n in archive] == [10, 6, 8, 1, 4]


def test_parallel_runs_stay_independent(tmp_path, config):
    _run(tmp_path, config, "parallel")
    nodes = Graph(tmp_path).nodes()
    by_id = {n.id: n for n in nodes}
    children = [n for n in nodes if n.parent is not None]
    assert sorted({n.island for n in nodes}) == [0, 1] and {n.island for n in children} == {0, 1}
    assert all(by_id[n.parent].island == n.island for n in children)
