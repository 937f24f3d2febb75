"""The frozen scoreboard and the strategy sampler."""

from __future__ import annotations

import random

import pytest

from maxkernel.search.config import ConfigMismatch, SearchConfig
from maxkernel.search.graph import Graph, Proposal
from maxkernel.search.strategies import (
    FIRST_VERSION,
    LIBRARY,
    PROFILER,
    StrategySampler,
    by_name,
)
from maxkernel.settings import get_settings

pytestmark = pytest.mark.unit


def test_scoreboard_comes_from_task_and_settings(config):
    c = config("beam")
    s = get_settings()
    assert c.seeds == tuple(range(s.eval_seeds))
    assert c.heldout_seeds[0] == s.heldout_seed_base and not set(c.seeds) & set(c.heldout_seeds)
    assert c.tolerances["bfloat16"] == 2e-2 and c.operator == "rms_norm" and len(c.task_digest) == 16
    with pytest.raises(ValueError, match="overlap"):
        SearchConfig.model_validate({**c.model_dump(), "heldout_seeds": (0, 9)})


def test_resume_may_change_limits_but_not_the_scoreboard(config):
    c = config("beam")
    more = c.model_copy(update={"limits": c.limits.model_copy(update={"max_nodes": 99}), "model": "replay"})
    assert c.resumed_with(more).limits.max_nodes == 99
    with pytest.raises(ConfigMismatch, match="seeds"):
        c.resumed_with(c.model_copy(update={"seeds": (0, 1)}))
    with pytest.raises(ConfigMismatch, match="algorithm"):
        c.resumed_with(c.model_copy(update={"algorithm": "evolve"}))


def test_library_is_filtered_by_operator():
    gemm = {s.name for s in StrategySampler("gemm").library}
    norm = {s.name for s in StrategySampler("rms_norm").library}
    assert "mxu-tiles" in gemm and "mxu-tiles" not in norm and "single-pass-rows" in norm
    assert {"bigger-blocks", "fuse-epilogue"} <= gemm & norm
    assert len({s.name for s in LIBRARY}) == len(LIBRARY)


def test_sampler_order_person_then_profiler_then_library_seeded(tmp_path):
    g = Graph(tmp_path)
    parent, = g.add_generation(0, [Proposal(None, "first-version", "x")])
    g.claim(parent.id)
    parent = g.finish(parent.id, verdict="correct", speedup=1.0, source="k", advice="memory-bound: fuse the passes")
    sampler = StrategySampler("rms_norm", [{"name": "my-idea", "family": "person", "text": "Do the thing."}])
    picks = sampler.pick(random.Random(1), parent, 4)
    assert [s.name for s in picks[:2]] == ["my-idea", PROFILER.name]
    assert picks == sampler.pick(random.Random(1), parent, 4)  # seeded: reproducible
    assert [s.name for s in sampler.pick(random.Random(1), parent, 2, tried={"my-idea"})][0] == PROFILER.name
    text = sampler.advice(picks[1], parent)
    assert "memory-bound: fuse the passes" in text and "parent_kernel.py" in text
    root = sampler.pick(random.Random(0), None, 3)
    assert root[0] == FIRST_VERSION and len({s.name for s in root}) == 3
    assert len(sampler.pick(random.Random(0), parent, 40)) == 40  # more than the library: repeats, still seeded
    # A person's strategy is found by name only through the graph's stored rows; library names always are.
    assert by_name("my-idea", g.strategies()) is None and by_name("my-idea") is None
    g.add_strategy("my-idea", "Do the thing.")
    found = by_name("my-idea", g.strategies())
    assert (found.name, found.family, found.text) == ("my-idea", "person", "Do the thing.")
    assert by_name("bigger-blocks") is LIBRARY[0] and by_name(PROFILER.name) is PROFILER
