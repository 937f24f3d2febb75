"""The `bench agent`, `bench evalset` and `report` commands, for maxkernel/cli.py to wire in (see cli.md)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["configure_bench_agent", "configure_bench_evalset", "configure_report", "cmd_bench_agent",
           "cmd_bench_evalset", "cmd_report"]


def _usage_error(message: str):
    from maxkernel.cli import UsageError

    return UsageError(message)


def _emit(args, payload, text: str) -> None:
    from maxkernel.cli import _emit as emit

    emit(args, payload, text)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _task_list(args) -> list[str]:
    import jaxbench

    if args.all and args.tasks:
        raise _usage_error("give --tasks or --all, not both")
    if args.all:
        return jaxbench.task_names()
    if not args.tasks:
        raise _usage_error("give --tasks A,B,... or --all")
    return [t.strip() for item in args.tasks for t in item.split(",") if t.strip()]


def cmd_bench_agent(args) -> int:
    from maxkernel.bench_agent import BenchError, run_bench_agent
    from maxkernel.evals.stats import FAST_P, fast_key

    try:
        doc = run_bench_agent(_task_list(args), mode=args.mode, model=args.model, out=args.out,
                              concurrency=args.concurrency, progress=_progress, size=args.size)
    except BenchError as exc:
        raise _usage_error(str(exc)) from None
    s = doc["summary"]
    lines = [f"{r['task']:<40} {'CORRECT' if r['correct'] else (r.get('failure') or 'failed').upper():<12} "
             + (f"{r['speedup']:.3g}x vs XLA" if r.get("speedup") else "") for r in doc["tasks"]]
    fast = "  ".join(f"{fast_key(p)} {s[fast_key(p)]:.0%}" for p in FAST_P if s[fast_key(p)] is not None)
    geo = f"{s['geomean_speedup']:.3g}x" if s["geomean_speedup"] else "—"
    lines.append(f"{s['tasks']} tasks, {s['correct']} correct; {fast}; geomean speedup {geo} (correct kernels)")
    if s["cpu_timing"]:
        lines.append("CPU: speedups are Pallas-interpreter vs XLA:CPU wall times, not TPU kernel performance")
    lines.append(f"records in {doc['out']}/records; `maxkernel report {doc['out']}` renders them")
    _emit(args, doc, "\n".join(lines))
    return 0


def cmd_report(args) -> int:
    from pathlib import Path

    from maxkernel.report import ReportError, render_report

    if not Path(args.dir).is_dir():
        raise _usage_error(f"results folder not found: {args.dir}")
    try:
        doc = render_report(args.dir, args.out)
    except ReportError as exc:
        raise _usage_error(str(exc)) from None
    text = f"wrote {doc['markdown']}\nwrote {doc['html']}\n" + "\n".join(f"wrote {p}" for p in doc["plots"])
    if doc["cpu_timing"]:
        text += "\nnote: CPU results: speedups are interpreter timings, and the report says so"
    _emit(args, doc, text)
    return 0


def cmd_bench_evalset(args) -> int:
    from maxkernel.evals.evalsets import named_eval_set, smoke_config_path, write_eval_set

    eval_set = named_eval_set(args.set, args.size)
    path = write_eval_set(eval_set, args.out or f"{eval_set.eval_set_id}.evalset.json")
    doc = {"eval_set_id": eval_set.eval_set_id, "path": str(path), "cases": len(eval_set.eval_cases),
           "config": str(smoke_config_path())}
    _emit(args, doc, f"wrote {path} ({doc['cases']} cases); run it with\n  adk eval maxkernel/agents/auto {path} "
                     f"--config_file_path {doc['config']}")
    return 0


def configure_bench_agent(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of `maxkernel bench agent`."""
    p.add_argument("--tasks", action="append", help="comma-separated task names (repeatable)")
    p.add_argument("--all", action="store_true", help="every suite task")
    p.add_argument("--mode", default="auto", choices=["auto", "search"])
    p.add_argument("--model", default=None, help="model for every agent: gemini-*, provider/model (LiteLLM) or replay")
    p.add_argument("--size", default="smoke", choices=["smoke", "full"])
    p.add_argument("--out", default=None, help="results folder; re-running with it resumes (default runs/bench-agent)")
    p.add_argument("--concurrency", type=int, default=1, help="tasks run at once (default 1)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench_agent)
    return p


def configure_bench_evalset(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of `maxkernel bench evalset`."""
    p.add_argument("--set", default="smoke", choices=["all", "p", "k", "smoke"])
    p.add_argument("--size", default="smoke", choices=["smoke", "full"])
    p.add_argument("--out", default=None, help="file to write (default ./<eval_set_id>.evalset.json)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench_evalset)
    return p


def configure_report(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of `maxkernel report`."""
    p.add_argument("dir", help="a `bench agent` results folder")
    p.add_argument("--out", default=None, help="Markdown file (or .html); the other format is written beside it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_report)
    return p
