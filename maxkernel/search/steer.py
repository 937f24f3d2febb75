"""Tools a person uses (through the search app) to steer a live search: read the frontier, pin or prune a
branch, add a strategy. They write the search's SQLite graph; the running controller reads it each generation."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from google.adk.tools import ToolContext
from pydantic import BaseModel, Field

from maxkernel.search.algorithms import Beam, Evolve, Parallel, build_algorithm
from maxkernel.search.config import SearchConfig
from maxkernel.search.graph import DB_NAME, Graph, Node

__all__ = ["open_search", "show_frontier", "show_node", "pin_node", "prune_branch", "add_strategy", "frontier",
           "SteerResult", "NodeRow"]

OUT_KEY = "search_out"


class NodeRow(BaseModel):
    id: int
    parent: int | None
    status: str
    verdict: str | None
    speedup: float | None
    strategy: str
    pinned: bool
    pruned: bool

    @classmethod
    def of(cls, n: Node) -> "NodeRow":
        return cls(id=n.id, parent=n.parent, status=n.status, verdict=n.verdict, speedup=n.speedup,
                   strategy=n.strategy, pinned=bool(n.pinned), pruned=bool(n.pruned))


class SteerResult(BaseModel):
    ok: bool
    summary: str
    frontier: list[NodeRow] = Field(default_factory=list, description="Kernels the next generation builds on.")
    in_flight: list[NodeRow] = Field(default_factory=list)
    detail: dict = Field(default_factory=dict)


def _dump(fn):
    """ADK stores a tool's result in the session as JSON: hand it the model's dict."""
    def wrapper(*args, **kwargs) -> dict:
        return fn(*args, **kwargs).model_dump()
    wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = fn.__name__, fn.__doc__, fn
    wrapper.__signature__ = inspect.signature(fn).replace(return_annotation=dict)
    return wrapper


def _graph(tool_context: ToolContext) -> Graph | SteerResult:
    out = tool_context.state.get(OUT_KEY)
    if not out:
        return SteerResult(ok=False, summary="No search is open: call open_search with the search's --out folder.")
    return Graph(out)


def frontier(graph: Graph) -> list[Node]:
    """The kernels the next generation will build on, as the search's own algorithm would choose them."""
    config = SearchConfig.model_validate(graph.meta("config"))
    algo, nodes = build_algorithm(config), graph.nodes()
    nxt = graph.last_generation() + 1
    if isinstance(algo, Beam):
        return algo.beam(nxt, nodes)
    best = sorted((n for n in nodes if n.correct and not n.pruned), key=lambda n: (-(n.speedup or 0.0), n.id))
    if isinstance(algo, Parallel):
        runs: dict[int, Node] = {}
        for n in best:
            runs.setdefault(n.island, n)
        return sorted(runs.values(), key=lambda n: n.island)
    if isinstance(algo, Evolve):
        return algo.archive(nxt, nodes)
    return best


def _final_line(graph: Graph) -> str | None:
    """A finished search's answer in the line the auto app ends with ("Best kernel: <path> from iteration N"),
    which the eval metrics read; the kernel is the one the search re-judged on held-out seeds."""
    result = graph.meta("result") or {}
    best = result.get("best")
    if not result:
        return None
    if not best:
        return f"The search finished with no kernel correct on held-out seeds ({result.get('status')})."
    node = graph.node(best["node"])
    return (f"Best kernel: {best['kernel']} from iteration {node.depth if node else '?'} (node {best['node']}, "
            f"{best['speedup']:.3g}x, correct on held-out seeds {best.get('heldout_seeds')}).")


def _view(graph: Graph, ok: bool, head: str) -> SteerResult:
    front = frontier(graph)
    flying = [n for n in graph.nodes() if n.status in ("running", "pending")]
    t = graph.totals()
    best = f"best node {t['best']} at {t['best_speedup']:.3g}x" if t["best"] is not None else "no correct kernel yet"
    lines = [head, f"{t['nodes']} nodes ({t['done']} done, {t['running']} running, {t['pending']} pending), {best}."]
    if front:
        lines.append("Frontier: " + "; ".join(f"#{n.id} {n.speedup:.3g}x {n.strategy}{' (pinned)' if n.pinned else ''}"
                                              for n in front))
    final = None if flying else _final_line(graph)  # a resumed search's earlier result is not its answer
    if final:
        lines.append(final)
    return SteerResult(ok=ok, summary="\n".join(lines), frontier=[NodeRow.of(n) for n in front],
                       in_flight=[NodeRow.of(n) for n in flying])


@_dump
def open_search(out_dir: str, tool_context: ToolContext) -> SteerResult:
    """Opens a search (live or finished) by its --out folder, for the other tools to act on.

    Args:
        out_dir: The folder given to `maxkernel search --out`.

    Returns:
        ok, a summary with node counts, the best kernel and the frontier.
    """
    folder = Path(out_dir).expanduser()
    if not (folder / DB_NAME).is_file():
        return SteerResult(ok=False, summary=f"No search in {folder}: give the folder that `maxkernel search --out` "
                                             f"wrote (it holds {DB_NAME}).")
    tool_context.state[OUT_KEY] = str(folder.resolve())
    g = Graph(folder)
    config = g.meta("config") or {}
    return _view(g, True, f"Opened the {config.get('algorithm')} search on {config.get('task')} in {folder}.")


@_dump
def show_frontier(tool_context: ToolContext) -> SteerResult:
    """Shows the search's frontier (the kernels its next generation builds on) and the nodes in flight.

    Returns:
        ok, a summary, the frontier and the in-flight nodes.
    """
    g = _graph(tool_context)
    return g if isinstance(g, SteerResult) else _view(g, True, "Current state:")


@_dump
def show_node(node_id: int, tool_context: ToolContext) -> SteerResult:
    """Shows one node: its strategy, verdict, speedup, the profiler's advice and its children.

    Args:
        node_id: The node's id (as in the frontier).

    Returns:
        ok, a summary, and the details (strategy text, verdict reason, advice, children).
    """
    g = _graph(tool_context)
    if isinstance(g, SteerResult):
        return g
    n = g.node(node_id)
    if n is None:
        return SteerResult(ok=False, summary=f"No node {node_id}; show_frontier lists the nodes.")
    kids = [c.id for c in g.nodes() if c.parent == n.id]
    speed = f"{n.speedup:.3g}x" if n.speedup is not None else "no speedup"
    summary = (f"Node {n.id} (parent {n.parent}, gen {n.gen}): {n.status} {n.verdict or ''}, {speed}; "
               f"strategy {n.strategy}; children {kids or 'none'}.")
    return SteerResult(ok=True, summary=summary, detail={
        "strategy_text": n.strategy_text, "note": (n.note or "")[:1500], "advice": n.advice, "children": kids,
        "timings": n.timings, "tokens": n.tokens, "kernel": n.artifact})


@_dump
def pin_node(node_id: int, tool_context: ToolContext, pinned: bool = True) -> SteerResult:
    """Pins a correct node so the search keeps building on it (or unpins it with pinned=false).

    Args:
        node_id: The node to pin.
        pinned: True to pin (default), False to unpin.

    Returns:
        ok and the updated frontier; a refusal says why (unknown node, not a correct kernel).
    """
    g = _graph(tool_context)
    if isinstance(g, SteerResult):
        return g
    n = g.node(node_id)
    if n is None:
        return SteerResult(ok=False, summary=f"No node {node_id}; show_frontier lists the nodes.")
    if pinned and not n.correct:
        return SteerResult(ok=False, summary=f"Node {node_id} is {n.status} {n.verdict or ''}: only a kernel the "
                                             "harness judged correct can be pinned.")
    g.set_pinned(node_id, pinned)
    return _view(g, True, f"Node {node_id} {'pinned: the next generations build on it' if pinned else 'unpinned'}.")


@_dump
def prune_branch(node_id: int, tool_context: ToolContext) -> SteerResult:
    """Prunes a node and everything below it: never used as a parent again; children not started are cancelled.

    Args:
        node_id: The root of the branch to prune.

    Returns:
        ok, which nodes were pruned and which cancelled, and the updated frontier.
    """
    g = _graph(tool_context)
    if isinstance(g, SteerResult):
        return g
    try:
        done = g.prune(node_id)
    except KeyError:
        return SteerResult(ok=False, summary=f"No node {node_id}; show_frontier lists the nodes.")
    res = _view(g, True, f"Pruned nodes {done['pruned']}; cancelled {done['cancelled'] or 'none'} before they started.")
    res.detail = done
    return res


@_dump
def add_strategy(name: str, text: str, tool_context: ToolContext) -> SteerResult:
    """Adds a strategy (an optimisation idea) that the search tries first on its next generation's parents.

    Args:
        name: A short identifier, letters, digits and dashes (e.g. "fuse-residual").
        text: What to do, as an instruction to the kernel planner.

    Returns:
        ok and a summary; a refusal says what name or text would be accepted.
    """
    g = _graph(tool_context)
    if isinstance(g, SteerResult):
        return g
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,47}", name or ""):
        return SteerResult(ok=False, summary="The name must be 1-48 letters, digits, '-' or '_', e.g. fuse-residual.")
    if len((text or "").strip()) < 10:
        return SteerResult(ok=False, summary="Say what to do in a sentence or more (at least 10 characters).")
    g.add_strategy(name, text.strip()[:2000])
    return SteerResult(ok=True, summary=f"Strategy {name!r} added: the next generation tries it first on each parent.")
