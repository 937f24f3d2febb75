"""`maxkernel search` / `search status` in process: the status document, and usage errors said before any work."""

from __future__ import annotations

import pytest

import json

from _fakes import FakeExecutor, FakeProducer

from maxkernel.cli import main as cli_main
from maxkernel.search.controller import run_search

pytestmark = pytest.mark.unit


def main(argv):
    return cli_main(["search", *argv])


def test_status_lists_nodes_as_cli_md_says(tmp_path, config, capsys):
    run_search(tmp_path, config("beam", limits={"max_nodes": 5}, beam={"width": 2, "branches": 2, "depth": 3}),
               producer=FakeProducer(), executor=FakeExecutor())
    assert main(["status", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["nodes"]) == 5 and {"id", "parent", "status", "speedup"} <= set(doc["nodes"][0])
    assert doc["result"]["stop_reason"] == "node budget (5) used" and doc["totals"]["done"] == 5
    assert main(["status", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("beam search on 12p_RMSNorm: 5 nodes") and "#1" in text


def test_usage_errors_exit_2_before_any_work(tmp_path, config, replay_env, capsys):
    assert main(["status", str(tmp_path / "nothing")]) == 2
    assert main(["--out", str(tmp_path / "new")]) == 2
    assert "--task is required" in capsys.readouterr().err
    assert main(["--task", "no_such_task", "--out", str(tmp_path / "x")]) == 2
    assert main(["--task", "2p_GQA_Attention", "--out", str(tmp_path / "y")]) == 2
    assert "recordings only for" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()
    run_search(tmp_path / "s", config("beam", limits={"max_nodes": 2}), producer=FakeProducer(),
               executor=FakeExecutor())
    assert main(["--task", "12p_RMSNorm", "--seed", "5", "--out", str(tmp_path / "s")]) == 2
    assert "scored on other settings" in capsys.readouterr().err
