"""Search-test set-up: synthetic kernels (see _fakes.py) for fast tests of the search machinery (algorithms,
graph, budgets, resume); the replay-model tests use the real agents and harness instead."""

from __future__ import annotations

import pytest

from maxkernel.search import make_config


@pytest.fixture
def config():
    """`config(algorithm, **options)` -> a SearchConfig for 12p_RMSNorm at smoke size."""
    def make(algorithm="beam", limits=None, **options):
        return make_config("12p_RMSNorm", algorithm=algorithm, limits={"max_nodes": 50, **(limits or {})},
                           profile=False, **options)
    return make


@pytest.fixture
def replay_env(tmp_path, monkeypatch):
    """The offline replay model and a private data folder, with the settings re-read."""
    from maxkernel.settings import get_settings

    monkeypatch.setenv("MAXKERNEL_MODEL", "replay")
    monkeypatch.setenv("MAXKERNEL_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    yield get_settings()
    monkeypatch.undo()
    get_settings.cache_clear()
