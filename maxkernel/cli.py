"""The `maxkernel` command line (see cli.md for the contract: --json, exit codes 0/1/2)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

__all__ = ["main"]


class UsageError(Exception):
    """Bad input from the user: exit code 2 with a one-line message."""


def _emit(args, payload, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(payload, indent=2, default=str))
    else:
        print(text)


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _task(spec: str):
    from maxkernel.tasks import TaskError, load_task

    try:
        return load_task(spec)
    except TaskError as exc:
        raise UsageError(str(exc)) from None


def _kernel(path: str):
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"kernel file not found: {path}")
    return p


def _size(task, size: str) -> str:
    if size not in task.sizes:
        raise UsageError(f"task {task.name} has no size {size!r} (has {', '.join(task.sizes)})")
    return size


# -- bench ------------------------------------------------------------------------------------------------
def cmd_bench_list(args) -> int:
    from maxkernel.bench import list_tasks

    rows = list_tasks()
    lines = [f"{r['name']:<58} {r['tier']}  {'reference kernel' if r['reference_kernel'] else ''}" for r in rows]
    _emit(args, rows, "\n".join(lines) + f"\n{len(rows)} tasks")
    return 0


def cmd_bench_run(args) -> int:
    import jaxbench
    from maxkernel.bench import time_task

    if not args.all and not args.task:
        raise UsageError("give --task TASK (repeatable) or --all")
    tasks = [_task(t) for t in (jaxbench.task_names() if args.all else args.task)]
    for t in tasks:
        _size(t, args.size)
    results = []
    for i, task in enumerate(tasks, 1):
        _progress(f"[{i}/{len(tasks)}] {task.name} ({args.size})")
        try:
            results.append(time_task(task, args.size, reps=args.reps, with_reference=not args.no_reference))
        except Exception as exc:  # one broken task must not lose the others' figures
            results.append({"name": task.name, "size": args.size, "error": f"{type(exc).__name__}: {exc}"[:500]})
    lines = []
    for r in results:
        if "error" in r:
            lines.append(f"{r['name']:<58} ERROR {r['error']}")
            continue
        ref = r.get("reference_kernel")
        extra = f"  reference kernel {ref['median_ms']:.3f} ms" if ref else ""
        lines.append(f"{r['name']:<58} {r['median_ms']:>10.3f} ms ±{r['iqr_ms']:.3f}  {r['backend']}{extra}")
    _emit(args, {"size": args.size, "tasks": results}, "\n".join(lines))
    return 0


# -- evaluate ---------------------------------------------------------------------------------------------
def cmd_evaluate(args) -> int:
    from maxkernel.harness.evaluate import evaluate

    task = _task(args.task)
    kernel = _kernel(args.kernel)
    _size(task, args.size)
    if args.seeds < 1:
        raise UsageError("--seeds must be at least 1")
    seeds = list(range(args.seed_base, args.seed_base + args.seeds))
    _progress(f"evaluating {kernel} on {task.name} ({args.size}, seeds {seeds[0]}..{seeds[-1]}) in a sandbox")
    v = evaluate(task, kernel, size=args.size, seeds=seeds, timeout=args.timeout)
    lines = [f"{v.status.upper()}: {v.reason}"]
    if v.correctness.max_rel_err is not None:
        lines.append(f"max error {v.correctness.max_rel_err:.3g} (tolerance {v.correctness.tolerance:.3g}) "
                     f"over seeds {v.correctness.seeds}")
    if v.kernel and v.baseline:
        lines.append(f"kernel {v.kernel.median_ms:.3f} ms ±{v.kernel.iqr_ms:.3f}, baseline {v.baseline.median_ms:.3f}"
                     f" ms ±{v.baseline.iqr_ms:.3f}, speedup {v.speedup:.3f}x")
        lines.append(f"({v.timing_label})")
    if v.integrity:
        lines.append(f"{v.integrity.get('pallas_share', 0):.0%} of FLOPs inside Pallas "
                     f"({v.integrity.get('pallas_calls', 0)} pallas_call)")
    if v.flags:
        lines.append("flags: " + ", ".join(v.flags))
    _emit(args, v.model_dump(), "\n".join(lines))
    return 0


# -- tools ------------------------------------------------------------------------------------------------
def _chip(name: str) -> str:
    from maxkernel import chips

    if name != "native":
        try:
            chips.get(name)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return name


def cmd_compile(args) -> int:
    from maxkernel.tools.compile_pallas import compile_pallas

    task, kernel = _task(args.task), _kernel(args.kernel)
    _size(task, args.size)
    _progress(f"compiling {kernel} for {args.chip} ({args.size} shapes) in a sandbox")
    r = compile_pallas(args.task, str(kernel), _chip(args.chip), args.size)
    _emit(args, r.model_dump(), r.summary + (f"\n{r.error}" if r.error else ""))
    return 0


def cmd_test(args) -> int:
    from maxkernel.tools.run_tests import run_tests

    task, kernel = _task(args.task), _kernel(args.kernel)
    _size(task, args.size)
    _progress(f"testing {kernel} on {task.name} ({args.size}) under the strict interpreter in a sandbox")
    r = run_tests(args.task, str(kernel), args.size, seeds=args.seeds, timeout=args.timeout)
    _emit(args, r.model_dump(), r.summary)
    return 0


def cmd_profile(args) -> int:
    from maxkernel.tools.xprof_capture import xprof_capture

    task, kernel = _task(args.task), _kernel(args.kernel)
    _size(task, args.size)
    _progress(f"profiling {kernel} against the {task.name} baseline ({args.size}) in a sandbox")
    r = xprof_capture(args.task, str(kernel), args.size, out_dir=args.out, chip=args.chip)
    lines = [r.summary]
    lines += [f"  {o.name:<48} {o.time_ms:>10.3f} ms  x{o.count:g}  {o.share:.0%}" for o in r.ops[:10]]
    if r.trace:
        lines.append(f"trace: {r.trace}")
    _emit(args, r.model_dump(), "\n".join(lines))
    return 0


def cmd_autotune(args) -> int:
    from maxkernel.tools.autotune import autotune

    task, kernel = _task(args.task), _kernel(args.kernel)
    _size(task, args.size)
    _progress(f"autotuning {kernel} ({args.chip} pruning, timing at {args.size}); this runs many sandboxed jobs")
    r = autotune(args.task, str(kernel), chip=_chip(args.chip), size=args.size, max_configs=args.max_configs,
                 time_budget_s=args.time_budget)
    lines = [r.summary] + [f"  {t.outcome:<9} {t.config}  {'' if t.median_ms is None else f'{t.median_ms:.3f} ms'}"
                           for t in r.tried]
    _emit(args, r.model_dump(), "\n".join(lines))
    return 0


# -- optimize ---------------------------------------------------------------------------------------------
def cmd_optimize(args) -> int:
    from maxkernel.optimize import OptimizeError, run_optimize

    try:
        r = run_optimize(args.task, mode=args.mode, model=args.model, size=args.size, out=args.out,
                         session_uri=args.session_uri, artifact_uri=args.artifact_uri, session_id=args.session_id,
                         progress=_progress)
    except OptimizeError as exc:
        raise UsageError(str(exc)) from None
    v = r["verdict"] or {}
    lines = [f"{r['status'].upper()}: {r['stop_reason'] or 'no result'}"]
    if r["kernel"]:
        lines.append(f"kernel: {r['kernel']}")
    if v.get("speedup") is not None:
        timing = "CPU interpreter time, not TPU time" if "cpu_timing" in v.get("flags", []) else v.get("backend")
        lines.append(f"held-out verdict {v['status'].upper()}: {v['reason']}; speedup {v['speedup']:.3g}x ({timing})")
    cost = "unknown cost" if r["cost_usd"] is None else f"${r['cost_usd']:.4f}"
    lines.append(f"{r['iterations']} iterations, {r['llm_calls']} LLM calls, {r['tokens']} tokens, {cost}"
                 + (" (replay model)" if r["replay"] else f" ({r['model']})"))
    lines.append(f"session: {r['session_id']}")
    _emit(args, r, "\n".join(lines))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="maxkernel", description="Write, verify, profile and tune JAX Pallas kernels.")
    sub = p.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="the jaxbench suite").add_subparsers(dest="bench_command", required=True)
    b = bench.add_parser("list", help="list the suite's tasks")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_list)
    b = bench.add_parser("run", help="time the XLA baselines (and reference kernels) on this machine's backend")
    b.add_argument("--task", action="append", help="task name or folder (repeatable)")
    b.add_argument("--all", action="store_true", help="every suite task")
    b.add_argument("--size", default="smoke", choices=["smoke", "full"])
    b.add_argument("--reps", type=int, default=20)
    b.add_argument("--no-reference", action="store_true", help="skip the shipped reference kernels")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_run)

    from maxkernel.evals import cli_commands as evals_cli

    evals_cli.configure_bench_agent(bench.add_parser("agent", help="run the agent over many tasks, resumable; fast_p summary"))
    evals_cli.configure_bench_evalset(bench.add_parser("evalset", help="write an ADK eval set over the suite"))

    e = sub.add_parser("evaluate", help="the trusted verdict on a kernel: sandboxed, multi-seed, integrity-checked")
    e.add_argument("--task", required=True)
    e.add_argument("--kernel", required=True)
    e.add_argument("--size", default="smoke", choices=["smoke", "full"])
    e.add_argument("--seeds", type=int, default=3, help="number of seeds (default 3)")
    e.add_argument("--seed-base", type=int, default=0, help="first seed (held-out verdicts use a base the agent never saw)")
    e.add_argument("--timeout", type=float, default=None, help="seconds for the candidate run")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_evaluate)

    c = sub.add_parser("compile", help="deviceless TPU compile (libtpu) or GPU lowering of a kernel")
    c.add_argument("--task", required=True)
    c.add_argument("--kernel", required=True)
    c.add_argument("--chip", default="v5e", help="v4, v5e, v5p, v6e, 7x, h100, h200 or native")
    c.add_argument("--size", default="full", choices=["smoke", "full"])
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_compile)

    t = sub.add_parser("test", help="strict correctness run (TPU interpreter on CPU: races, out-of-bounds, NaN scratch)")
    t.add_argument("--task", required=True)
    t.add_argument("--kernel", required=True)
    t.add_argument("--size", default="smoke", choices=["smoke", "full"])
    t.add_argument("--seeds", type=int, default=3)
    t.add_argument("--timeout", type=float, default=None)
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_test)

    pr = sub.add_parser("profile", help="profile kernel and baseline; save an XProf trace and a per-op table")
    pr.add_argument("--task", required=True)
    pr.add_argument("--kernel", required=True)
    pr.add_argument("--size", default="smoke", choices=["smoke", "full"])
    pr.add_argument("--out", default=None, help="folder for the trace (default ./profiles/<task>-<time>)")
    pr.add_argument("--chip", default=None, help="chip for the roofline (default: the device, v5e on CPU)")
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(func=cmd_profile)

    a = sub.add_parser("autotune", help="search the kernel's TUNABLES: compile-prune, correctness-gate, time")
    a.add_argument("--task", required=True)
    a.add_argument("--kernel", required=True)
    a.add_argument("--chip", default="v5e")
    a.add_argument("--size", default="smoke", choices=["smoke", "full"])
    a.add_argument("--max-configs", type=int, default=16)
    a.add_argument("--time-budget", type=float, default=600.0)
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_autotune)

    from maxkernel.search.cli_commands import add_search_parser

    add_search_parser(sub)

    o = sub.add_parser("optimize", help="run the autonomous agent on one task (HITL runs in adk web)")
    o.add_argument("--task", required=True)
    o.add_argument("--mode", default="auto", choices=["auto", "hitl"])
    o.add_argument("--model", default=None, help="model for every agent: gemini-*, provider/model (LiteLLM) or replay")
    o.add_argument("--size", default="smoke", choices=["smoke", "full"])
    o.add_argument("--out", default=None, help="folder for the best kernel (kernel.py) and its verdict.json")
    o.add_argument("--session-uri", default=None, help="sqlite:///path (default), memory://, agentengine://ID, ...")
    o.add_argument("--artifact-uri", default=None, help="file:///path (default), memory://, gs://bucket")
    o.add_argument("--session-id", default=None, help="resume this session (created with this id if absent)")
    o.add_argument("--json", action="store_true")
    o.set_defaults(func=cmd_optimize)

    evals_cli.configure_report(sub.add_parser("report", help="render bench agent results as Markdown/HTML with plots"))
    return p


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed a one-line usage error
        return 2 if exc.code else 0
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"maxkernel: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("maxkernel: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001
        print(f"maxkernel: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        from maxkernel.settings import get_settings

        if get_settings().debug:
            traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
