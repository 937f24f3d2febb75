"""`maxkernel bench`: the suite (list, run), the agent over many tasks (agent), the shipped kernels' table (kernels),
ADK eval sets (evalset)."""

from __future__ import annotations

import click

from maxkernel.cli._common import (SIZES, UsageError, check_size, check_task, chip_option, emit, json_option, progress,
                                   resolve_chip, track, use_chip)

__all__ = ["bench"]


@click.group()
def bench() -> None:
    """The jaxbench suite: list it, time its baselines, run the agent over it, write eval sets."""


def suite_option(fn):
    return click.option("--suite", default="jaxbench", show_default=True, type=click.Choice(["jaxbench", "realworld", "all"]),
                        help="jaxbench (the 50 public tasks), realworld (production ops beyond it) or all")(fn)


@bench.command("list")
@suite_option
@json_option
def bench_list(suite: str, as_json: bool) -> None:
    """List a suite's tasks."""
    from maxkernel.bench import list_tasks

    rows = list_tasks(suite)
    # Each field in its own column: a realworld task's configs never stand under the kernel column.
    lines = [f"{'task':<58} {'tier'}  {'full size fits':<18}  {'kernel':<6}  configs"]
    lines += [f"{r['name']:<58} {r['tier']:<4}  {','.join(r['fits_chips']):<18}  "
              f"{'yes' if r['reference_kernel'] else '-':<6}  {', '.join(r['configs']) or '-'}" for r in rows]
    emit(as_json, rows, "\n".join(lines) + f"\n{len(rows)} tasks")


@bench.command("run")
@click.option("--task", "tasks", multiple=True, help="task name or folder (repeatable)")
@click.option("--all", "all_tasks", is_flag=True, help="every task of --suite")
@suite_option
@click.option("--size", default="smoke", show_default=True, type=click.Choice(SIZES))
@click.option("--reps", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--no-reference", is_flag=True, help="skip the shipped reference kernels")
@json_option
def bench_run(tasks: tuple[str, ...], all_tasks: bool, suite: str, size: str, reps: int, no_reference: bool,
              as_json: bool) -> None:
    """Time the XLA baselines (and reference kernels) on this machine's backend. Exit 0 every task timed, 1 some
    task could not be (its row says why; the others' figures are kept), 2 usage."""
    import jaxbench

    if all_tasks == bool(tasks):
        raise UsageError("give --task TASK (repeatable) or --all")
    loaded = [check_task(t) for t in (jaxbench.task_names(suite) if all_tasks else tasks)]
    for t in loaded:
        check_size(t, size)
    from maxkernel.bench import time_task

    results = []
    for task in track(loaded, len(loaded), lambda t: f"{t.name} ({size})"):
        try:
            results.append(time_task(task, size, reps=reps, with_reference=not no_reference))
        except Exception as exc:  # noqa: BLE001 - one broken task must not lose the others' figures
            results.append({"name": task.name, "size": size, "error": f"{type(exc).__name__}: {exc}"[:500]})
    lines = []
    for r in results:
        if "error" in r:
            lines.append(f"{r['name']:<58} ERROR {r['error']}")
            continue
        ref = r.get("reference_kernel")
        extra = f"  reference kernel {ref['median_ms']:.3f} ms" if ref else ""
        lines.append(f"{r['name']:<58} {r['median_ms']:>10.3f} ms ±{r['iqr_ms']:.3f}  {r['backend']}{extra}")
    emit(as_json, {"size": size, "tasks": results}, "\n".join(lines), ok=not any("error" in r for r in results))


def _task_list(tasks: tuple[str, ...], all_tasks: bool, suite: str = "jaxbench") -> list[str]:
    import jaxbench

    if all_tasks and tasks:
        raise UsageError("give --tasks or --all, not both")
    if all_tasks:
        return jaxbench.task_names(suite)
    if not tasks:
        raise UsageError("give --tasks A,B,... or --all")
    return [t.strip() for item in tasks for t in item.split(",") if t.strip()]


def summary_lines(doc: dict) -> list[str]:
    """What `bench agent` prints: a row per task (ranked speedup, named by its source), fast_p and the geomean."""
    from maxkernel.evals import sources
    from maxkernel.evals.stats import FAST_P, fast_key

    s = doc["summary"]
    lines = [f"{r['task']:<40} {'CORRECT' if r['correct'] else (r.get('failure') or 'failed').upper():<12} "
             + _ranked_speedup(r) for r in doc["tasks"]]
    fast = "  ".join(f"{fast_key(p)} {s[fast_key(p)]:.0%}" for p in FAST_P if s[fast_key(p)] is not None)
    geo = f"{s['geomean_speedup']:.3g}x" if s["geomean_speedup"] else "—"
    by = f", by {s['source_label']}" if s.get("source_label") else ""
    lines.append(f"{s['tasks']} tasks, {s['correct']} correct; {fast}; geomean speedup {geo} (correct kernels{by})")
    for part in s.get("apart") or []:
        lines.append(f"  not folded in: {len(part.get('rows') or [])} correct kernel(s) ranked by "
                     f"{part.get('source_label') or part.get('source')}")
    if s["cpu_timing"] and any(sources.ranked(r)[1] == sources.CPU for r in doc["tasks"]):
        lines.append("CPU: speedups are Pallas-interpreter vs XLA:CPU wall times, not TPU kernel performance")
    for name, g in (s.get("by_suite") or {}).items() if len(s.get("by_suite") or {}) > 1 else ():
        geo_s = f"{g['geomean_speedup']:.3g}x" if g["geomean_speedup"] else "—"
        lines.append(f"  {name}: {g['tasks']} tasks, {g['correct']} correct; geomean speedup {geo_s}")
    if doc.get("skipped"):
        lines.append(f"skipped {len(doc['skipped'])}: {doc['skipped'][0]['reason']}")
    lines.append(f"records in {doc['out']}/records; `maxkernel report {doc['out']}` renders them")
    return lines


def _ranked_speedup(record: dict) -> str:
    """A task row's speedup: the one its record is ranked by (the TPU estimate off a TPU), named by its source;
    never the interpreter's wall-time ratio under an estimate's headline."""
    from maxkernel.evals import sources

    value, source = sources.ranked(record)
    if not value:
        return ""
    chip = f" on {record['estimate_chip']}" if source == sources.ESTIMATE and record.get("estimate_chip") else ""
    return f"{value:.3g}x vs XLA ({sources.label(source)}{chip})"


@bench.command("agent")
@click.option("--tasks", multiple=True, help="comma-separated task names (repeatable)")
@click.option("--all", "all_tasks", is_flag=True, help="every task of --suite")
@suite_option
@click.option("--mode", default="auto", show_default=True, type=click.Choice(["auto", "search"]))
@click.option("--model", default=None, help="model for every agent: gemini-*, provider/model (LiteLLM) or replay")
@click.option("--size", default="smoke", show_default=True, type=click.Choice(SIZES))
@chip_option(what="chip the kernels are written for (in auto mode on attached TPU hardware, the attached one wins)",
             allow_native=False)
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="results folder; re-running with it resumes (default runs/bench-agent)")
@click.option("--concurrency", default=1, show_default=True, type=click.IntRange(min=1), help="tasks run at once")
@click.option("--backend", default="local", show_default=True, type=click.Choice(["local", "ray"]),
              help="ray: each task a Ray task, on a local cluster or --ray-address's (records are the same)")
@click.option("--ray-address", default=None, help="an existing Ray cluster ('auto' or host:port); none starts one")
@json_option
def bench_agent(tasks, all_tasks, suite, mode, model, size, chip_name, out, concurrency, backend, ray_address,
                as_json) -> None:
    """Run the agent over many tasks, resumable; fast_p summary (per suite when there are two). Exit 0 when every
    task has its record (an incorrect kernel is a measured result), 1 when some task ended in agent_error (a
    re-run with the same --out retries those), 2 usage."""
    chip = resolve_chip(chip_name, allow_native=False)
    names = _task_list(tasks, all_tasks, suite)
    from maxkernel.bench_agent import BenchError, run_bench_agent

    use_chip(chip)  # every task's loop or search reads the settings' chip
    try:
        doc = run_bench_agent(names, mode=mode, model=model, out=out, concurrency=concurrency, progress=progress,
                              size=size, backend=backend, ray_address=ray_address)
    except BenchError as exc:
        raise UsageError(str(exc)) from None
    lines = summary_lines(doc)
    emit(as_json, doc, "\n".join(lines), ok=not any(r.get("failure") == "agent_error" for r in doc["tasks"]))


@bench.command("kernels")
@suite_option
@click.option("--task", "tasks", multiple=True, help="a task name or task folder with a kernel.py (repeatable); "
              "default every task of --suite that ships one")
@click.option("--chip", "chips", multiple=True, metavar="CHIP",
              help="TPU chip to compile and estimate for (repeatable); default the settings' chip")
@click.option("--out", default="runs/kernels", show_default=True, type=click.Path(file_okay=False),
              help="results folder (records/, kernels.json, kernels.md, kernels.png); re-running with it resumes")
@click.option("--backend", default="local", show_default=True, type=click.Choice(["local", "ray"]),
              help="ray: each row a Ray task, on a local cluster or --ray-address's (records are the same)")
@click.option("--ray-address", default=None, help="an existing Ray cluster ('auto' or host:port); none starts one")
@click.option("--concurrency", default=2, show_default=True, type=click.IntRange(min=1),
              help="rows made at once on Ray (a conv row's profile can take 8 GB)")
@json_option
def bench_kernels(suite, tasks, chips, out, backend, ray_address, concurrency, as_json) -> None:
    """The shipped kernels' table: each task's kernel.py judged by the harness (fresh seeds, smoke size), compiled at
    full size and estimated against XLA on each chip; fast_p by estimate per chip. A task whose kernel, files and
    estimator are unchanged since its record is not redone. Exit 0 when every kernel is correct and estimated on
    every chip, 1 when some is not, 2 usage."""
    from maxkernel.evals.stats import FAST_P, fast_key
    from maxkernel.kernel_table import TableError, expert_line, run_table, table_tasks

    names = list(dict.fromkeys(resolve_chip(c, allow_native=False, tpu_only=True) for c in chips)) or \
        [resolve_chip(None, allow_native=False, tpu_only=True)]
    try:
        picked = table_tasks(suite, [t.strip() for item in tasks for t in item.split(",") if t.strip()])
        if not picked:
            raise TableError(f"no task of --suite {suite} ships a kernel.py")
        doc = run_table(picked, names, out, progress=progress, backend=backend, ray_address=ray_address,
                        concurrency=concurrency)
    except TableError as exc:
        raise UsageError(str(exc)) from None
    lines = []
    for r in doc["rows"]:
        cells = "  ".join(f"{c} {cell['speedup']:.2f}x" if cell.get("speedup") else f"{c} —"
                          for c, cell in (r.get("chips") or {}).items())
        lines.append(f"{r['task']:<44} {r['status'].upper():<10} {cells}".rstrip())
    for c in names:
        f = doc["summary"]["by_chip"][c]["all"]
        geo = f"{f['geomean_speedup']:.3g}x over {f['estimated']} kernels" if f["geomean_speedup"] else "—"
        lines.append(f"{c}: {f['correct']}/{f['tasks']} correct; "
                     + " ".join(f"{fast_key(p)} {f[fast_key(p)]:.0%}" for p in FAST_P) + f"; geomean speedup {geo}"
                     + (f"; not estimated: {', '.join(f['not_estimated'])}" if f["not_estimated"] else "")
                     + (f"; too rough to count: {', '.join(f['rough'])}" if f.get("rough") else ""))
        if expert_line(c, f.get("vs_expert")):
            lines.append(expert_line(c, f["vs_expert"]))
    lines.append(f"speedups are {doc['label']}")
    lines.append(f"table in {doc['files']['markdown']}, plot {doc['files']['plot']}, JSON {doc['files']['json']}")
    complete = all(r["correct"] and all((r["chips"].get(c) or {}).get("speedup") for c in names) for r in doc["rows"])
    emit(as_json, doc, "\n".join(lines), ok=complete)


@bench.command("evalset")
@click.option("--set", "set_name", default="smoke", show_default=True, type=click.Choice(["all", "p", "k", "smoke"]))
@click.option("--size", default="smoke", show_default=True, type=click.Choice(SIZES))
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="file to write (default ./<eval_set_id>.evalset.json)")
@json_option
def bench_evalset(set_name: str, size: str, out: str | None, as_json: bool) -> None:
    """Write an ADK eval set over the suite."""
    from maxkernel.evals.evalsets import named_eval_set, smoke_config_path, write_eval_set

    eval_set = named_eval_set(set_name, size)
    path = write_eval_set(eval_set, out or f"{eval_set.eval_set_id}.evalset.json")
    doc = {"eval_set_id": eval_set.eval_set_id, "path": str(path), "cases": len(eval_set.eval_cases),
           "config": str(smoke_config_path())}
    emit(as_json, doc, f"wrote {path} ({doc['cases']} cases); run it with\n  adk eval maxkernel/apps/auto {path} "
                       f"--config_file_path {doc['config']}")
