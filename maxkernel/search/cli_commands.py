"""`maxkernel search` and `maxkernel search status`: the command functions and their argparse lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["cmd_search", "cmd_search_status", "add_search_parser", "format_progress"]

# CLI option -> where it goes in the config (algorithm parameters, limits, or top level).
_ALGO = {"runs": "parallel", "width": "beam", "branches": "beam", "keep": "beam", "islands": "evolve",
         "population": "evolve", "generations": "evolve", "migration_interval": "evolve"}
_LIMITS = ("max_nodes", "max_tokens", "max_cost_usd", "max_wall_s", "workers", "model_workers", "eval_workers",
           "max_debug_rounds")
_TOP = ("size", "algorithm", "backend", "model", "seed", "ray_address", "profile")


def add_search_parser(sub) -> None:
    """Add `search` (and `search status DIR`) to the `maxkernel` subparsers."""
    s = sub.add_parser("search", help="graph search over candidate kernels; re-run with the same --out to resume")
    s.add_argument("--task", default=None, help="task name or folder (not needed to resume an --out)")
    s.add_argument("--algorithm", default=None, choices=["parallel", "beam", "evolve"], help="default beam")
    s.add_argument("--backend", default=None, choices=["local", "ray"], help="default local")
    s.add_argument("--ray-address", default=None, help="existing Ray cluster (auto or host:port); none starts one")
    s.add_argument("--model", default=None, help="gemini-*, provider/model (LiteLLM) or replay")
    s.add_argument("--max-nodes", type=int, default=None)
    s.add_argument("--max-tokens", type=int, default=None)
    s.add_argument("--max-cost", dest="max_cost_usd", type=float, default=None, help="USD")
    s.add_argument("--max-wall", dest="max_wall_s", type=float, default=None, help="seconds")
    s.add_argument("--workers", type=int, default=None, help="nodes in flight")
    s.add_argument("--model-workers", type=int, default=None, help="model calls in flight")
    s.add_argument("--eval-workers", type=int, default=None, help="device evaluations at once")
    s.add_argument("--max-debug-rounds", type=int, default=None)
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--size", default=None, choices=["smoke", "full"], help="default smoke")
    s.add_argument("--depth", type=int, default=None, help="parallel: iterations per run; beam: generations")
    s.add_argument("--runs", type=int, default=None, help="parallel: independent runs")
    s.add_argument("--width", type=int, default=None, help="beam: kernels kept")
    s.add_argument("--branches", type=int, default=None, help="beam: children per kept kernel")
    s.add_argument("--keep", default=None, choices=["improvements", "regressions"], help="beam")
    s.add_argument("--islands", type=int, default=None, help="evolve")
    s.add_argument("--population", type=int, default=None, help="evolve: children per island per generation")
    s.add_argument("--generations", type=int, default=None, help="evolve")
    s.add_argument("--migration-interval", type=int, default=None, help="evolve")
    s.add_argument("--no-profile", dest="profile", action="store_false", default=None,
                   help="skip the profiler's advice on correct kernels")
    s.add_argument("--out", default=None, help="search folder (default <data dir>/searches/TASK-ALGORITHM-seedS)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_search)
    st = s.add_subparsers(dest="search_command").add_parser("status", help="read a search's graph")
    st.add_argument("dir", help="the search's --out folder")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_search_status)


def _usage(msg: str):
    from maxkernel.cli import UsageError

    return UsageError(msg)


def format_progress(event: dict) -> str:
    t = event["totals"]
    best = f"best {t['best_speedup']:.3g}x (node {t['best']})" if t["best"] is not None else "no correct kernel yet"
    return (f"[{t['done']}/{t['nodes']} nodes, {best}, {t['tokens']} tokens, ${t['cost_usd']:.4f}, "
            f"{event['elapsed_s']:.0f}s] {event['text']}")


def _progress(event: dict) -> None:
    if event["event"] != "log":
        print(format_progress(event), file=sys.stderr, flush=True)


def _requested(args, stored):
    """The config these arguments ask for: a new search's, or the stored one with the given options changed."""
    from maxkernel.search.config import SearchConfig, make_config

    given = {k: getattr(args, k) for k in (*_ALGO, *_LIMITS, *_TOP, "task", "depth") if getattr(args, k, None) is not None}
    if stored is None:
        if not given.get("task"):
            raise _usage("--task is required to start a search")
        algorithm = given.get("algorithm", "beam")
        nested: dict = {"parallel": {}, "beam": {}, "evolve": {}}
        for k, where in _ALGO.items():
            if k in given:
                nested[where][k] = given[k]
        if "depth" in given:
            nested["parallel" if algorithm == "parallel" else "beam"]["depth"] = given["depth"]
        return make_config(given["task"], size=given.get("size", "smoke"), algorithm=algorithm,
                           seed=given.get("seed", 0), model=given.get("model"), backend=given.get("backend", "local"),
                           limits={k: given[k] for k in _LIMITS if k in given}, ray_address=given.get("ray_address"),
                           profile=given.get("profile", True), **nested)
    data = stored.model_dump(mode="json")
    for k in _TOP:
        if k in given:
            data[k] = given[k]
    for k in _LIMITS:
        if k in given:
            data["limits"][k] = given[k]
    for k, where in _ALGO.items():
        if k in given:
            data[where][k] = given[k]
    if "depth" in given:
        data["parallel" if data["algorithm"] == "parallel" else "beam"]["depth"] = given["depth"]
    if "task" in given:
        from maxkernel.tasks import load_task

        t = load_task(given["task"])
        data["task"] = t.name if t.source == "jaxbench" else str(t.path)
    return SearchConfig.model_validate(data)


def _check_model(config) -> bool:
    """Credentials and replay coverage checked before any work; True when the replay model is used."""
    from maxkernel.agentlib.models import (
        ModelConfigError,
        check_credentials,
        is_replay,
        model_name,
    )
    from maxkernel.agentlib.replay.model import recorded_tasks
    from maxkernel.agentlib.sub_agents import ROLES

    names = {model_name(role, override=config.model) for role in ROLES}
    for name in names:
        try:
            check_credentials(name)
        except ModelConfigError as exc:
            raise _usage(str(exc)) from None
    replay = any(is_replay(n) for n in names)
    if replay and Path(config.task).name not in recorded_tasks():
        raise _usage(f"the replay model has recordings only for {', '.join(recorded_tasks())}")
    return replay


def cmd_search(args) -> int:
    from maxkernel.search.config import ConfigMismatch, SearchConfig
    from maxkernel.search.controller import SearchError, run_search
    from maxkernel.search.graph import DB_NAME, Graph
    from maxkernel.settings import get_settings
    from maxkernel.tasks import TaskError

    stored = None
    out = Path(args.out) if args.out else None
    if out is not None and (out / DB_NAME).is_file():
        raw = Graph(out).meta("config")
        stored = SearchConfig.model_validate(raw) if raw else None
    try:
        config = _requested(args, stored)
    except (TaskError, ValueError) as exc:
        raise _usage(str(exc)) from None
    if out is None:
        out = get_settings().data_dir / "searches" / f"{Path(config.task).name}-{config.algorithm}-seed{config.seed}"
    replay = _check_model(config)
    print(f"search folder: {out}" + (" (offline replay model)" if replay else ""), file=sys.stderr, flush=True)
    try:
        result = run_search(out, config, progress=_progress)
    except (ConfigMismatch, SearchError) as exc:
        raise _usage(str(exc)) from None
    result["replay"] = replay
    best = result["best"]
    lines = [f"{result['status'].upper()}: {result['stop_reason']}; {result['nodes']} nodes"]
    if best:
        lines.append(f"best: node {best['node']}, {best['speedup']:.3g}x, correct on held-out seeds "
                     f"{best['heldout_seeds']}; kernel: {best['kernel']}")
    lines.append(f"graph: {result['graph_html']}")
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2, default=str))
    else:
        print("\n".join(lines))
    return 0


def search_status(folder: str | Path) -> dict:
    """The cli.md `search status` document for a search folder."""
    from maxkernel.search.graph import DB_NAME, Graph

    folder = Path(folder)
    if not (folder / DB_NAME).is_file():
        raise _usage(f"no search in {folder} (no {DB_NAME})")
    g = Graph(folder)
    config = g.meta("config") or {}
    return {"dir": str(folder), "task": config.get("task"), "algorithm": config.get("algorithm"),
            "totals": g.totals(), "elapsed_s": round(g.meta("elapsed_s", 0.0), 1), "result": g.meta("result"),
            "strategies_added": [s["name"] for s in g.strategies()], "nodes": [n.brief() for n in g.nodes()]}


def cmd_search_status(args) -> int:
    doc = search_status(args.dir)
    t = doc["totals"]
    lines = [f"{doc['algorithm']} search on {doc['task']}: {t['nodes']} nodes ({t['done']} done, {t['pending']} "
             f"pending, {t['running']} running), {t['correct']} correct, {t['tokens']} tokens, ${t['cost_usd']:.4f}"]
    for n in doc["nodes"]:
        speed = f"{n['speedup']:.3g}x" if n["speedup"] is not None else "-"
        marks = ("pinned " if n["pinned"] else "") + ("pruned" if n["pruned"] else "")
        lines.append(f"  #{n['id']:<4} parent {str(n['parent']):<5} {n['status']:<9} {str(n['verdict']):<14} "
                     f"{speed:>8}  {n['strategy']} {marks}".rstrip())
    if doc["result"]:
        lines.append(f"result: {doc['result']['status']} ({doc['result']['stop_reason']})")
    if getattr(args, "json", False):
        print(json.dumps(doc, indent=2, default=str))
    else:
        print("\n".join(lines))
    return 0
