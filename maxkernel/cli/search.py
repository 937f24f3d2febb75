"""`maxkernel search` (start or resume a graph search) and `maxkernel search status DIR` (read its graph)."""

from __future__ import annotations

from pathlib import Path

import click

from maxkernel.cli._common import SIZES, UsageError, emit, json_option, progress

__all__ = ["search", "search_status", "format_progress"]

# CLI option -> where it goes in the config (algorithm parameters, limits, or top level).
_ALGO = {"runs": "parallel", "width": "beam", "branches": "beam", "keep": "beam", "islands": "evolve",
         "population": "evolve", "generations": "evolve", "migration_interval": "evolve"}
_LIMITS = ("max_nodes", "max_tokens", "max_cost_usd", "max_wall_s", "workers", "model_workers", "eval_workers",
           "max_debug_rounds")
_TOP = ("size", "algorithm", "backend", "model", "seed", "ray_address", "profile")

_POS = click.IntRange(min=1)


def format_progress(event: dict) -> str:
    t = event["totals"]
    best = f"best {t['best_speedup']:.3g}x (node {t['best']})" if t["best"] is not None else "no correct kernel yet"
    return (f"[{t['done']}/{t['nodes']} nodes, {best}, {t['tokens']} tokens, ${t['cost_usd']:.4f}, "
            f"{event['elapsed_s']:.0f}s] {event['text']}")


def _on_event(event: dict) -> None:
    if event["event"] != "log":
        progress(format_progress(event))


def _requested(given: dict, stored):
    """The config these options ask for: a new search's, or the stored one with the given options changed."""
    from maxkernel.search.config import SearchConfig, make_config

    if stored is None:
        if not given.get("task"):
            raise UsageError("--task is required to start a search")
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
    from maxkernel.agents.models import ModelConfigError, check_credentials, is_replay, model_name
    from maxkernel.agents.replay.model import recorded_tasks
    from maxkernel.agents.sub_agents import ROLES

    names = {model_name(role, override=config.model) for role in ROLES}
    for name in names:
        try:
            check_credentials(name)
        except ModelConfigError as exc:
            raise UsageError(str(exc)) from None
    replay = any(is_replay(n) for n in names)
    if replay and Path(config.task).name not in recorded_tasks():
        raise UsageError(f"the replay model has recordings only for {', '.join(recorded_tasks())}")
    return replay


@click.group(invoke_without_command=True)
@click.option("--task", default=None, help="task name or folder (not needed to resume an --out)")
@click.option("--algorithm", default=None, type=click.Choice(["parallel", "beam", "evolve"]), help="default beam")
@click.option("--backend", default=None, type=click.Choice(["local", "ray"]), help="default local")
@click.option("--ray-address", default=None, help="existing Ray cluster (auto or host:port); none starts one")
@click.option("--model", default=None, help="gemini-*, provider/model (LiteLLM) or replay")
@click.option("--max-nodes", type=_POS, default=None)
@click.option("--max-tokens", type=_POS, default=None)
@click.option("--max-cost", "max_cost_usd", type=click.FloatRange(min=0), default=None, help="USD")
@click.option("--max-wall", "max_wall_s", type=click.FloatRange(min=0), default=None, help="seconds")
@click.option("--workers", type=_POS, default=None, help="nodes in flight")
@click.option("--model-workers", type=_POS, default=None, help="model calls in flight")
@click.option("--eval-workers", type=_POS, default=None, help="device evaluations at once")
@click.option("--max-debug-rounds", type=click.IntRange(min=0), default=None)
@click.option("--seed", type=int, default=None)
@click.option("--size", default=None, type=click.Choice(SIZES), help="default smoke")
@click.option("--depth", type=_POS, default=None, help="parallel: iterations per run; beam: generations")
@click.option("--runs", type=_POS, default=None, help="parallel: independent runs")
@click.option("--width", type=_POS, default=None, help="beam: kernels kept")
@click.option("--branches", type=_POS, default=None, help="beam: children per kept kernel")
@click.option("--keep", default=None, type=click.Choice(["improvements", "regressions"]), help="beam")
@click.option("--islands", type=_POS, default=None, help="evolve")
@click.option("--population", type=_POS, default=None, help="evolve: children per island per generation")
@click.option("--generations", type=_POS, default=None, help="evolve")
@click.option("--migration-interval", type=_POS, default=None, help="evolve")
@click.option("--no-profile", "profile", flag_value=False, default=None, help="skip the profiler's advice on correct kernels")
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="search folder (default <data dir>/searches/TASK-ALGORITHM-seedS)")
@json_option
@click.pass_context
def search(ctx: click.Context, out: str | None, as_json: bool, **options) -> None:
    """Graph search over candidate kernels; re-run with the same --out to resume."""
    if ctx.invoked_subcommand is not None:
        return
    from maxkernel.search.graph import DB_NAME, Graph

    if not options["task"] and not (out and (Path(out) / DB_NAME).is_file()):
        raise UsageError("--task is required to start a search")  # said before the heavy imports below
    from maxkernel.search.config import ConfigMismatch, SearchConfig
    from maxkernel.search.controller import SearchError, run_search
    from maxkernel.settings import get_settings
    from maxkernel.tasks import TaskError

    given = {k: v for k, v in options.items() if v is not None}
    stored = None
    folder = Path(out) if out else None
    if folder is not None and (folder / DB_NAME).is_file():
        raw = Graph(folder).meta("config")
        stored = SearchConfig.model_validate(raw) if raw else None
    try:
        config = _requested(given, stored)
    except (TaskError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if folder is None:
        folder = get_settings().data_dir / "searches" / f"{Path(config.task).name}-{config.algorithm}-seed{config.seed}"
    replay = _check_model(config)
    progress(f"search folder: {folder}" + (" (offline replay model)" if replay else ""))
    try:
        result = run_search(folder, config, progress=_on_event)
    except (ConfigMismatch, SearchError) as exc:
        raise UsageError(str(exc)) from None
    result["replay"] = replay
    best = result["best"]
    lines = [f"{result['status'].upper()}: {result['stop_reason']}; {result['nodes']} nodes"]
    if best:
        lines.append(f"best: node {best['node']}, {best['speedup']:.3g}x, correct on held-out seeds "
                     f"{best['heldout_seeds']}; kernel: {best['kernel']}")
    lines.append(f"graph: {result['graph_html']}")
    emit(as_json, result, "\n".join(lines))


def search_status(folder: str | Path) -> dict:
    """The cli.md `search status` document for a search folder."""
    from maxkernel.search.graph import DB_NAME, Graph

    folder = Path(folder)
    if not (folder / DB_NAME).is_file():
        raise UsageError(f"no search in {folder} (no {DB_NAME})")
    g = Graph(folder)
    config = g.meta("config") or {}
    return {"dir": str(folder), "task": config.get("task"), "algorithm": config.get("algorithm"),
            "totals": g.totals(), "elapsed_s": round(g.meta("elapsed_s", 0.0), 1), "result": g.meta("result"),
            "strategies_added": [s["name"] for s in g.strategies()], "nodes": [n.brief() for n in g.nodes()]}


@search.command("status")
@click.argument("folder", metavar="DIR", type=click.Path())
@json_option
def status(folder: str, as_json: bool) -> None:
    """Read a search's graph."""
    doc = search_status(folder)
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
    emit(as_json, doc, "\n".join(lines))


