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

__all__ = ["UsageError", "Target", "preflight", "target_options", "chip_option", "json_option", "emit", "progress",
           "track", "check_task", "check_size", "check_chip", "target_chips", "resolve_chip", "use_chip"]

SIZES = ("smoke", "full")


class UsageError(click.UsageError):
    """Bad input from the user: exit code 2 with a one-line message, before any work starts."""


# -- completion -------------------------------------------------------------------------------------------
def _complete_task(ctx, param, incomplete: str):
    import jaxbench

    return [click.shell_completion.CompletionItem(n) for n in jaxbench.task_names() if n.startswith(incomplete)]


def _complete_chip(ctx, param, incomplete: str):
    return [click.shell_completion.CompletionItem(n) for n in (*target_chips(), "native") if n.startswith(incomplete)]


# -- pre-flight: cheap checks, no jax import, well under a second -----------------------------------------
def target_chips(*, tpu_only: bool = False) -> list[str]:
    """The chips a kernel can be compiled, judged or estimated for: the TPUs, and the GPUs unless `tpu_only`.
    The table's cpu entry is not one: it only gives CPU figures a scale, and no compiler targets it."""
    from maxkernel.chips import CHIPS

    return [n for n, c in CHIPS.items() if c.is_tpu or (c.platform == "gpu" and not tpu_only)]


def check_chip(name: str, *, allow_native: bool = True, tpu_only: bool = False, source: str = "--chip") -> str:
    """The table's name for chip `name`, or a UsageError naming the valid chips (`source` says where the name came
    from: the option, or the setting that supplied its default)."""
    from maxkernel import chips

    if allow_native and name == "native":
        return name
    valid = ", ".join(target_chips(tpu_only=tpu_only) + (["native"] if allow_native else []))
    where = "" if source == "--chip" else f" (from {source})"
    try:
        chip = chips.get(name)
    except ValueError:
        raise UsageError(f"unknown chip {name!r}{where}; valid chips: {valid}") from None
    if chip.platform == "cpu":
        raise UsageError(f"{source} {name}: the CPU is not a target chip (Pallas kernels run there only in interpret "
                         f"mode); valid chips: {valid}")
    if tpu_only and not chip.is_tpu:
        raise UsageError(f"{source} {chip.name}: TPU estimates need a TPU chip ({valid})")
    return chip.name


def resolve_chip(name: str | None, *, allow_native: bool = True, tpu_only: bool = False) -> str:
    """--chip's value checked, or without one the settings' chip (MAXKERNEL_CHIP, default v5e), checked too."""
    if name is not None:
        return check_chip(name, allow_native=allow_native, tpu_only=tpu_only)
    from maxkernel.settings import get_settings

    return check_chip(get_settings().chip, allow_native=allow_native, tpu_only=tpu_only, source="MAXKERNEL_CHIP")


def use_chip(chip: str) -> None:
    """Make `chip` the target of all this process runs: the harness, the agents and the search read the settings'
    chip, so --chip overrides it there, as every command-line option overrides its setting."""
    from maxkernel.settings import get_settings

    get_settings().chip = chip


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
    # SIZE@CONFIG (full@decode) names one of a task's configs: those only the imported task knows.
    sizes = declared_sizes(task) if "@" not in size else None
    if sizes is None or size not in sizes:  # the message names every size, its configs' too
        try:
            sizes = task.sizes  # imports the task: a broken baseline.py is the user's input, not our failure
        except Exception as exc:  # noqa: BLE001
            if sizes is None:
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
    tunables: dict | None = None  # --set NAME=VALUE: `kernel` is then a private copy with those defaults
    source: Path | None = None  # the user's file when `kernel` is that copy


def with_tunables(target: Target, sets: tuple[str, ...]) -> Target:
    """The target with its kernel replaced by a private copy whose workload() keyword defaults are `sets`
    (NAME=VALUE, VALUE a Python literal or else a string); UsageError for a malformed pair or an unknown name."""
    import atexit
    import shutil
    import tempfile

    from maxkernel.tools.autotune import with_defaults

    config = {}
    for pair in sets:
        name, eq, text = pair.partition("=")
        if not eq or not name.strip().isidentifier():
            raise UsageError(f"--set takes NAME=VALUE (e.g. --set block_m=512), not {pair!r}")
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()
        config[name.strip()] = value
    try:
        source = with_defaults(target.kernel.read_text(), config)
    except (ValueError, SyntaxError, OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--set: {target.kernel}: {exc}") from None
    folder = Path(tempfile.mkdtemp(prefix="maxkernel-set-"))
    atexit.register(shutil.rmtree, folder, True)
    copy = folder / target.kernel.name
    copy.write_text(source)
    progress(f"{target.kernel} with " + ", ".join(f"{k}={v!r}" for k, v in config.items()) + " (the file is unchanged)")
    return Target(task=target.task, kernel=copy, size=target.size, chip=target.chip, tunables=config,
                  source=target.kernel)


def preflight(task: str, kernel: str | None, size: str, chip: str | None = None, *, allow_native: bool = True,
              tpu_only: bool = False) -> Target:
    """Every cheap check, cheapest first, before anything heavy starts; UsageError on the first failure."""
    chip = check_chip(chip, allow_native=allow_native, tpu_only=tpu_only) if chip is not None else None
    kernel_path = check_kernel(kernel) if kernel is not None else None
    t = check_task(task)
    return Target(task=t, kernel=kernel_path, size=check_size(t, size), chip=chip)


# -- shared options -------------------------------------------------------------------------------------
def json_option(fn: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="print one JSON document on stdout")(fn)


def chip_option(*, what: str, allow_native: bool = True, tpu_only: bool = False,
                default: str = "the settings' chip (MAXKERNEL_CHIP, v5e unless set)") -> Callable:
    """--chip (as `chip_name`, None when not given), the same option on every command that judges or estimates
    for a chip; its help names the chips the command accepts."""
    chips = ", ".join(target_chips(tpu_only=tpu_only)) + (" or native (the attached device)" if allow_native else "")
    return click.option("--chip", "chip_name", default=None, metavar="CHIP", shell_complete=_complete_chip,
                        help=f"{what}: {chips}; default {default}")


def target_options(*, size: str = "smoke", chip: str | None = None, chip_help: str | None = None,
                   allow_native: bool = True, tpu_only: bool = False, kernel: bool | str = True,
                   tunables: bool = True, task: bool | str = True) -> Callable:
    """--task, --kernel, --size, --chip and --set, checked by `preflight` and handed to the command as one
    `target: Target` argument; --json as `as_json`.

    `chip`: None for no --chip; "settings" for a --chip that defaults to the settings' chip (Target.chip is always
    a checked name); "device" for one that defaults to none (Target.chip None: the command reads the device).
    `chip_help` says what the chip is for."""
    if chip not in (None, "settings", "device"):
        raise ValueError(f"chip={chip!r}: use None, 'settings' or 'device'")

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, task_name=None, kernel_file=None, size_name, chip_name=None, sets=(), **kw):
            if chip == "settings":  # the chip first, as preflight does: cheapest check first
                chip_name = resolve_chip(chip_name, allow_native=allow_native, tpu_only=tpu_only)
            if task_name is None:  # task="optional": the command has another way to name its program
                if kernel_file is not None or sets:
                    raise UsageError("--kernel and --set need --task (the task the kernel is for)")
                if size_name not in SIZES:
                    raise UsageError(f"--size {size_name!r}: without --task, one of {', '.join(SIZES)}")
                chip_checked = check_chip(chip_name, allow_native=allow_native, tpu_only=tpu_only) if chip_name else None
                return fn(*args, target=Target(task=None, kernel=None, size=size_name, chip=chip_checked), **kw)
            target = preflight(task_name, kernel_file, size_name, chip_name, allow_native=allow_native,
                               tpu_only=tpu_only)
            if sets:
                if target.kernel is None:
                    raise UsageError("--set changes a kernel's workload() defaults: it needs --kernel")
                target = with_tunables(target, sets)
            return fn(*args, target=target, **kw)

        opts = [click.option("--task", "task_name", required=task is True, shell_complete=_complete_task,
                             help="a suite task name (8p_GEMM) or a JAXBench-style task folder")]
        if kernel:
            optional = kernel == "optional"  # the command works on the task's baseline alone without one
            opts.append(click.option("--kernel", "kernel_file", required=not optional, type=click.Path(dir_okay=False),
                                     help="Python file defining workload(*inputs)"
                                          + ("; without it, the task's XLA baseline alone" if optional else "")))
        if kernel and tunables:
            opts.append(click.option("--set", "sets", multiple=True, metavar="NAME=VALUE",
                                     help="run the kernel with this keyword default of workload() changed (a "
                                          "tunable such as block_m=512; repeatable); the file is not edited"))
        opts.append(click.option("--size", "size_name", default=size, show_default=True, metavar="SIZE",
                                 help="smoke = CPU-sized inputs, full = benchmark-sized; a task with configs "
                                      "(bench list) takes SIZE@CONFIG for one of them (full@decode)"))
        if chip is not None:
            opts.append(chip_option(what=chip_help or "target chip", allow_native=allow_native, tpu_only=tpu_only,
                                    **({"default": "the attached device (v5e on a CPU)"} if chip == "device" else {})))
        for opt in reversed(opts):
            wrapper = opt(wrapper)
        return json_option(wrapper)

    return decorate


# -- output -----------------------------------------------------------------------------------------------
def emit(as_json: bool, payload, text: str, *, ok: bool = True) -> None:
    """The command's result: one JSON document with --json, else the text; always on stdout. `ok=False` (the
    command worked and its answer is the bad one: incorrect, failed to compile, not estimated) exits 1 after it."""
    if as_json:
        click.echo(json.dumps(payload, indent=2, default=str))
    else:
        click.echo(text)
    if not ok:
        raise click.exceptions.Exit(1)


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
