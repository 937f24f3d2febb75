"""The candidate database: one SQLite file (WAL, transactional writes) holding every node of a search.

A node is planned (pending), claimed (running), then finished (done) in separate transactions; a process
killed at any moment leaves finished nodes intact and at worst a running node, which `recover()` puts back
to pending. Kernel sources are kept in the row and as an artifact file beside the database.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

__all__ = ["Graph", "Node", "Proposal", "DB_NAME", "VERDICT_COLOURS"]

DB_NAME = "graph.sqlite"
# Node verdicts beyond the harness's own statuses: the cascade stopped before the harness, or no kernel came.
VERDICT_COLOURS = {"correct": "#2e9d4f", "incorrect": "#e8912d", "compile_error": "#d64541", "error": "#a33",
                   "timeout": "#7a3b8f", "rejected": "#5b2c6f", "no_kernel": "#9aa0a6", "failed": "#666",
                   None: "#ffffff"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (
  id INTEGER PRIMARY KEY, gen INTEGER NOT NULL, slot INTEGER NOT NULL, parent INTEGER REFERENCES nodes(id),
  depth INTEGER NOT NULL, island INTEGER NOT NULL DEFAULT 0, strategy TEXT NOT NULL, family TEXT NOT NULL DEFAULT '',
  strategy_text TEXT NOT NULL DEFAULT '', status TEXT NOT NULL DEFAULT 'pending', verdict TEXT, stage TEXT,
  speedup REAL, verdict_json TEXT, source TEXT, source_sha TEXT, artifact TEXT, advice TEXT, note TEXT,
  timings_json TEXT, tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL NOT NULL DEFAULT 0,
  llm_calls INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, pinned INTEGER NOT NULL DEFAULT 0,
  pruned INTEGER NOT NULL DEFAULT 0, created REAL, started REAL, finished REAL, UNIQUE (gen, slot));
CREATE TABLE IF NOT EXISTS evals (scope TEXT NOT NULL, sha TEXT NOT NULL, stage TEXT NOT NULL, result TEXT NOT NULL,
  wall_s REAL, created REAL, PRIMARY KEY (scope, sha, stage));
CREATE TABLE IF NOT EXISTS strategies (name TEXT PRIMARY KEY, family TEXT NOT NULL, text TEXT NOT NULL,
  created REAL NOT NULL);
"""


@dataclass(frozen=True)
class Proposal:
    """A node an algorithm wants: which parent, which strategy (and its full advice text), which island."""

    parent: int | None
    strategy: str
    strategy_text: str
    family: str = ""
    island: int = 0


@dataclass(frozen=True)
class Node:
    id: int
    gen: int
    slot: int
    parent: int | None
    depth: int
    island: int
    strategy: str
    family: str
    strategy_text: str
    status: str
    verdict: str | None
    stage: str | None
    speedup: float | None
    verdict_json: str | None
    source: str | None
    source_sha: str | None
    artifact: str | None
    advice: str | None
    note: str | None
    timings_json: str | None
    tokens: int
    cost_usd: float
    llm_calls: int
    attempts: int
    pinned: int
    pruned: int
    created: float | None
    started: float | None
    finished: float | None

    @property
    def correct(self) -> bool:
        return self.status == "done" and self.verdict == "correct"

    @property
    def timings(self) -> dict:
        return json.loads(self.timings_json) if self.timings_json else {}

    @property
    def verdict_data(self) -> dict:
        return json.loads(self.verdict_json) if self.verdict_json else {}

    def brief(self) -> dict:
        """The row as cli.md's `search status` lists it."""
        return {"id": self.id, "parent": self.parent, "status": self.status, "verdict": self.verdict,
                "speedup": self.speedup, "strategy": self.strategy, "depth": self.depth, "gen": self.gen,
                "island": self.island, "pinned": bool(self.pinned), "pruned": bool(self.pruned)}


_COLUMNS = [f.name for f in fields(Node)]


class Graph:
    """The SQLite candidate database of one search folder; safe to share between threads and processes."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder).resolve()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / DB_NAME
        self._local = threading.local()
        self._con().executescript(_SCHEMA)

    # -- connections and transactions ---------------------------------------------------------------------
    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            con.row_factory = sqlite3.Row
            con.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed node survives a power cut too, not only a killed process.
            con.execute("PRAGMA synchronous=FULL")
            con.execute("PRAGMA foreign_keys=ON")
            con.execute("PRAGMA busy_timeout=60000")
            self._local.con = con
        return con

    @contextmanager
    def _write(self):
        con = self._con()
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None

    # -- meta ---------------------------------------------------------------------------------------------
    def meta(self, key: str, default=None):
        row = self._con().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row["value"]) if row else default

    def set_meta(self, key: str, value) -> None:
        with self._write() as con:
            con.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def add_elapsed(self, seconds: float) -> float:
        with self._write() as con:
            row = con.execute("SELECT value FROM meta WHERE key = 'elapsed_s'").fetchone()
            total = (json.loads(row["value"]) if row else 0.0) + max(seconds, 0.0)
            con.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('elapsed_s', ?)", (json.dumps(total),))
        return total

    # -- nodes --------------------------------------------------------------------------------------------
    def _rows(self, where: str = "1", args: tuple = ()) -> list[Node]:
        cur = self._con().execute(f"SELECT {', '.join(_COLUMNS)} FROM nodes WHERE {where} ORDER BY id", args)
        return [Node(**dict(r)) for r in cur.fetchall()]

    def nodes(self) -> list[Node]:
        return self._rows()

    def node(self, node_id: int) -> Node | None:
        rows = self._rows("id = ?", (node_id,))
        return rows[0] if rows else None

    def generation(self, gen: int) -> list[Node]:
        return self._rows("gen = ?", (gen,))

    def last_generation(self) -> int:
        row = self._con().execute("SELECT MAX(gen) AS g FROM nodes").fetchone()
        return -1 if row["g"] is None else int(row["g"])

    def add_generation(self, gen: int, proposals: list[Proposal], start: int = 0, meta: dict | None = None) -> list[Node]:
        """Insert generation `gen`'s proposals from slot `start` on, only if exactly `start` nodes of it exist (so
        a repeated call, e.g. after a crash, adds nothing twice); `meta` entries are set in the same transaction."""
        with self._write() as con:
            for k, v in (meta or {}).items():
                con.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (k, json.dumps(v)))
            have = con.execute("SELECT COUNT(*) AS n FROM nodes WHERE gen = ?", (gen,)).fetchone()["n"]
            if have == start:
                now = time.time()
                for slot, p in enumerate(proposals, start=start):
                    depth = 1
                    if p.parent is not None:
                        depth = con.execute("SELECT depth FROM nodes WHERE id = ?", (p.parent,)).fetchone()["depth"] + 1
                    con.execute("INSERT INTO nodes (gen, slot, parent, depth, island, strategy, family, strategy_text,"
                                " created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                (gen, slot, p.parent, depth, p.island, p.strategy, p.family, p.strategy_text, now))
        return self.generation(gen)

    def claim(self, node_id: int) -> bool:
        """pending -> running; False when the node is no longer pending (cancelled, or taken)."""
        with self._write() as con:
            cur = con.execute("UPDATE nodes SET status = 'running', started = ?, attempts = attempts + 1 "
                              "WHERE id = ? AND status = 'pending'", (time.time(), node_id))
            return cur.rowcount == 1

    def finish(self, node_id: int, *, verdict: str, stage: str = "", speedup: float | None = None,
               verdict_json: dict | None = None, source: str | None = None, source_sha: str | None = None,
               advice: str | None = None, note: str = "", timings: dict | None = None, tokens: int = 0,
               cost_usd: float = 0.0, llm_calls: int = 0) -> Node:
        """Record a finished node: its kernel file first (atomically), then the row in one transaction."""
        artifact = self.write_artifact(node_id, source) if source is not None else None
        with self._write() as con:
            con.execute("UPDATE nodes SET status = 'done', verdict = ?, stage = ?, speedup = ?, verdict_json = ?, "
                        "source = ?, source_sha = ?, artifact = ?, advice = ?, note = ?, timings_json = ?, tokens = ?,"
                        " cost_usd = ?, llm_calls = ?, finished = ? WHERE id = ?",
                        (verdict, stage, speedup, json.dumps(verdict_json) if verdict_json is not None else None,
                         source, source_sha, str(artifact) if artifact else None, advice, note[:4000],
                         json.dumps(timings or {}), int(tokens), float(cost_usd), int(llm_calls), time.time(),
                         node_id))
        return self.node(node_id)

    def recover(self) -> list[int]:
        """Nodes a killed process left running go back to pending (their work was not finished)."""
        with self._write() as con:
            ids = [r["id"] for r in con.execute("SELECT id FROM nodes WHERE status = 'running'").fetchall()]
            con.execute("UPDATE nodes SET status = 'pending', started = NULL WHERE status = 'running'")
        return ids

    def write_artifact(self, node_id: int, source: str) -> Path:
        folder = self.folder / "kernels"
        folder.mkdir(exist_ok=True)
        dest = folder / f"node-{node_id}.py"
        tmp = dest.with_suffix(f".tmp{os.getpid()}")
        with open(tmp, "w") as f:
            f.write(source)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(dest)
        return dest

    # -- steering -----------------------------------------------------------------------------------------
    def set_pinned(self, node_id: int, pinned: bool = True) -> Node:
        with self._write() as con:
            if con.execute("UPDATE nodes SET pinned = ? WHERE id = ?", (int(pinned), node_id)).rowcount != 1:
                raise KeyError(f"no node {node_id}")
        return self.node(node_id)

    def descendants(self, node_id: int) -> list[int]:
        rows = self._con().execute(
            "WITH RECURSIVE sub(id) AS (SELECT id FROM nodes WHERE parent = ? UNION ALL "
            "SELECT n.id FROM nodes n JOIN sub ON n.parent = sub.id) SELECT id FROM sub ORDER BY id",
            (node_id,)).fetchall()
        return [r["id"] for r in rows]

    def prune(self, node_id: int) -> dict:
        """Mark a node and its descendants pruned; those not started yet are cancelled."""
        with self._write() as con:
            if con.execute("SELECT 1 FROM nodes WHERE id = ?", (node_id,)).fetchone() is None:
                raise KeyError(f"no node {node_id}")
        ids = [node_id] + self.descendants(node_id)
        marks = ",".join("?" * len(ids))
        with self._write() as con:
            con.execute(f"UPDATE nodes SET pruned = 1 WHERE id IN ({marks})", ids)
            cancelled = [r["id"] for r in con.execute(
                f"SELECT id FROM nodes WHERE id IN ({marks}) AND status = 'pending'", ids).fetchall()]
            con.execute(f"UPDATE nodes SET status = 'cancelled' WHERE id IN ({marks}) AND status = 'pending'", ids)
        return {"pruned": ids, "cancelled": cancelled}

    def add_strategy(self, name: str, text: str, family: str = "person") -> None:
        with self._write() as con:
            con.execute("INSERT OR REPLACE INTO strategies (name, family, text, created) VALUES (?, ?, ?, ?)",
                        (name, family, text, time.time()))

    def strategies(self) -> list[dict]:
        rows = self._con().execute("SELECT name, family, text, created FROM strategies ORDER BY created, name")
        return [dict(r) for r in rows.fetchall()]

    # -- evaluation memo ----------------------------------------------------------------------------------
    def eval_result(self, scope: str, sha: str, stage: str) -> dict | None:
        row = self._con().execute("SELECT result FROM evals WHERE scope = ? AND sha = ? AND stage = ?",
                                  (scope, sha, stage)).fetchone()
        return json.loads(row["result"]) if row else None

    def put_eval(self, scope: str, sha: str, stage: str, result: dict, wall_s: float) -> None:
        with self._write() as con:
            con.execute("INSERT OR REPLACE INTO evals (scope, sha, stage, result, wall_s, created) "
                        "VALUES (?, ?, ?, ?, ?, ?)", (scope, sha, stage, json.dumps(result), wall_s, time.time()))

    def eval_count(self) -> int:
        return self._con().execute("SELECT COUNT(*) AS n FROM evals").fetchone()["n"]

    # -- totals -------------------------------------------------------------------------------------------
    def totals(self) -> dict:
        nodes = self.nodes()
        by = {s: sum(1 for n in nodes if n.status == s) for s in ("pending", "running", "done", "cancelled")}
        correct = [n for n in nodes if n.correct]
        best = max(correct, key=lambda n: (n.speedup or 0.0, -n.id), default=None)
        return {"nodes": len(nodes) - by["cancelled"], **by, "correct": len(correct),
                "tokens": sum(n.tokens for n in nodes), "cost_usd": round(sum(n.cost_usd for n in nodes), 6),
                "llm_calls": sum(n.llm_calls for n in nodes), "best": best.id if best else None,
                "best_speedup": best.speedup if best else None}
