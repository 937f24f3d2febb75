"""The candidate database: transactional node lifecycle, resume recovery, steering marks, the evaluation memo."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from maxkernel.search.graph import DB_NAME, Graph, Proposal

pytestmark = pytest.mark.unit


def _props(n, parent=None, island=0):
    return [Proposal(parent, f"s{i}", f"text {i}", "fam", island) for i in range(n)]


def test_generation_is_written_once_and_depth_follows_parents(tmp_path):
    g = Graph(tmp_path)
    first = g.add_generation(0, _props(2))
    assert [(n.gen, n.slot, n.depth, n.status) for n in first] == [(0, 0, 1, "pending"), (0, 1, 1, "pending")]
    again = g.add_generation(0, _props(5))  # a resume re-proposing gen 0 keeps what is stored
    assert [n.id for n in again] == [n.id for n in first]
    kids = g.add_generation(1, _props(1, parent=first[1].id))
    assert kids[0].depth == 2 and kids[0].parent == first[1].id
    assert g.last_generation() == 1
    con = sqlite3.connect(tmp_path / DB_NAME)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_lifecycle_finish_writes_artifact_and_recover_requeues_running(tmp_path):
    g = Graph(tmp_path)
    a, b = g.add_generation(0, _props(2))
    assert g.claim(a.id) and not g.claim(a.id)  # a node is claimed once
    done = g.finish(a.id, verdict="correct", stage="timing", speedup=1.5, verdict_json={"x": 1}, source="src\n",
                    source_sha="abc", timings={"total_s": 1.0}, tokens=10, cost_usd=0.5, llm_calls=2)
    assert done.correct and done.status == "done" and (tmp_path / "kernels" / f"node-{a.id}.py").read_text() == "src\n"
    assert g.claim(b.id)
    # A new process (a new Graph on the same file) after a kill: b was in flight, a was finished.
    g2 = Graph(tmp_path)
    assert g2.recover() == [b.id]
    assert g2.node(b.id).status == "pending" and g2.node(a.id).verdict_data == {"x": 1}
    t = g2.totals()
    assert (t["nodes"], t["done"], t["pending"], t["tokens"], t["best"]) == (2, 1, 1, 10, a.id)


def test_prune_marks_descendants_and_cancels_unstarted(tmp_path):
    g = Graph(tmp_path)
    root, other = g.add_generation(0, _props(2))
    for n in (root, other):
        g.claim(n.id)
        g.finish(n.id, verdict="correct", speedup=1.0, source="x")
    kid, = g.add_generation(1, _props(1, parent=root.id))
    grandkid, = g.add_generation(2, _props(1, parent=kid.id))
    g.claim(kid.id)  # running: keeps running, but is marked pruned
    res = g.prune(root.id)
    assert res == {"pruned": [root.id, kid.id, grandkid.id], "cancelled": [grandkid.id]}
    assert g.node(kid.id).status == "running" and g.node(kid.id).pruned
    assert not g.node(other.id).pruned and g.totals()["cancelled"] == 1
    with pytest.raises(KeyError):
        g.prune(999)
    assert g.set_pinned(other.id).pinned == 1


def test_strategies_meta_and_eval_memo(tmp_path):
    g = Graph(tmp_path)
    g.add_strategy("fuse-residual", "Fuse the residual add into the epilogue.")
    assert [s["name"] for s in g.strategies()] == ["fuse-residual"]
    g.set_meta("config", {"a": 1})
    assert Graph(tmp_path).meta("config") == {"a": 1} and g.meta("missing", 3) == 3
    assert g.add_elapsed(2.0) == 2.0 and g.add_elapsed(1.5) == 3.5
    g.put_eval("", "sha1", "compile", {"ok": True}, 0.2)
    assert g.eval_result("", "sha1", "compile") == {"ok": True} and g.eval_result("node-1", "sha1", "compile") is None


def test_concurrent_writers_lose_nothing(tmp_path):
    g = Graph(tmp_path)
    nodes = g.add_generation(0, _props(16))

    def work(chunk):
        for n in chunk:
            assert g.claim(n.id)
            g.finish(n.id, verdict="incorrect", source=f"# {n.id}\n")

    threads = [threading.Thread(target=work, args=(nodes[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Graph(tmp_path).totals()["done"] == 16
