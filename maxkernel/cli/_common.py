"""What every command shares: the one-line usage error, the shared options, the pre-flight, output and progress."""

from __future__ import annotations

import ast
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import click

from maxkernel import pysource

__all__ = ["UsageError", "Target", "preflight", "target_options", "json_option", "emit", "progress", "track",
           "check_task", "check_size", "check_chip"]

SIZES = ("smoke", "full")


class UsageError(click.UsageError):
    """Bad input from the user: exit code 2 with a one-line message, before any work starts."""


# -- completion -------------------------------------------------------------------------------------------
def _complete_task(ctx, param, incomplete: str):
    import jaxbench

    return [click.shell_completion.CompletionItem(n) for n in jaxbench.task_names() if n.startswith(incomplete)]


def _complete_chip(ctx, param, incomplete: str):
    from maxkernel.chips import CHIPS

    return [click.shell_completion.CompletionItem(n) for n in (*CHIPS, "native") if n.startswith(incomplete)]


# -- pre-flight: cheap checks, no jax import, well under a second -----------------------------------------
def check_chip(name: str, *, allow_native: bool = True) -> str:
    from maxkernel import chips

    if allow_native and name == "native":
        return name
    try:
        return chips.get(name).name
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_task(spec: str):
    from maxkernel.tasks import TaskError, load_task

    try:
        return load_task(spec)
    except TaskError as exc:
        raise UsageError(str(exc)) from None


def check_kernel(path: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise UsageError(f"kernel file not found: {path}")
    return p


def declared_sizes(task) -> list[str] | None:
    """The sizes a task's baseline.py declares, read from its `SIZES = {...}` literal without importing it
    (importing a task imports jax); None when the file does not declare them as a literal."""
    try:
        tree = pysource.parse(task.baseline_file.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SIZES" for t in node.targets):
            if isinstance(node.value, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.value.keys):
                return ["full"] + sorted(str(k.value) for k in node.value.keys)
            return None
    return ["full"]


def check_size(task, size: str) -> str:
    sizes = declared_sizes(task)
    if sizes is None:
        try:
            sizes = task.sizes  # imports the task: a broken baseline.py is the user's input, not our failure
        except Exception as exc:  # noqa: BLE001
            raise UsageError(f"task {task.name}: baseline.py does not load ({type(exc).__name__}: {exc})") from None
    if size not in sizes:
        raise UsageError(f"task {task.name} has no size {size!r} (has {', '.join(sizes)})")
    return size


@dataclass(frozen=True)
class Target:
    """A command's checked inputs: the task, the kernel file, the size and (where asked for) the chip."""

    task: Any
    kernel: Path | None
    size: str
    chip: str | None


def preflight(task: str, kernel: str | None, size: str, chip: str | None = None) -> Target:
    """Every cheap check, cheapest first, before anything heavy starts; UsageError on the first failure."""
    chip = check_chip(chip) if chip is not None else None
    kernel_path = check_kernel(kernel) if kernel is not None else None
    t = check_task(task)
    return Target(task=t, kernel=kernel_path, size=check_size(t, size), chip=chip)


# -- shared options -------------------------------------------------------------------------------------
def json_option(fn: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="print one JSON document on stdout")(fn)


def target_options(*, size: str = "smoke", chip: str | None = None, chip_help: str | None = None,
                   kernel: bool = True) -> Callable:
    """--task, --kernel, --size (and --chip when `chip` gives its default), checked by `preflight` and handed to
    the command as one `target: Target` argument; --json as `as_json`."""

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, task, kernel_file=None, size_name, chip_name=None, **kw):
            return fn(*args, target=preflight(task, kernel_file, size_name, chip_name), **kw)

        opts = [click.option("--task", required=True, shell_complete=_complete_task,
                             help="a suite task name (8p_GEMM) or a JAXBench-style task folder")]
        if kernel:
            opts.append(click.option("--kernel", "kernel_file", required=True, type=click.Path(dir_okay=False),
                                     help="Python file defining workload(*inputs)"))
        opts.append(click.option("--size", "size_name", default=size, show_default=True, type=click.Choice(SIZES),
                                 help="smoke = CPU-sized inputs, full = benchmark-sized"))
        if chip is not None:
            opts.append(click.option("--chip", "chip_name", default=chip, show_default=True,
                                     shell_complete=_complete_chip,
                                     help=chip_help or "v4, v5e, v5p, v6e, 7x, h100, h200 or native"))
        for opt in reversed(opts):
            wrapper = opt(wrapper)
        return json_option(wrapper)

    return decorate


# -- output -----------------------------------------------------------------------------------------------
def emit(as_json: bool, payload, text: str) -> None:
    """The command's result: one JSON document with --json, else the text; always on stdout."""
    if as_json:
        click.echo(json.dumps(payload, indent=2, default=str))
    else:
        click.echo(text)


def progress(msg: str) -> None:
    """A progress line on stderr (never stdout: --json output stays one document)."""
    click.echo(msg, err=True)


def track(items: Iterable, total: int, label: Callable[[Any], str]) -> Iterator:
    """Iterate `items`, showing progress on stderr: a rich progress bar on a terminal, plain numbered lines
    otherwise (logs and CI keep every line)."""
    items = list(items)
    if not sys.stderr.isatty():
        for i, item in enumerate(items, 1):
            progress(f"[{i}/{total}] {label(item)}")
            yield item
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=False) as bar:
        job = bar.add_task("", total=total)
        for item in items:
            bar.update(job, description=label(item))
            yield item
            bar.advance(job)
