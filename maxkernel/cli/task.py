"""`maxkernel task new`: bring your own workload (a JAX function and argument specs become a validated task)."""

from __future__ import annotations

import click

from maxkernel.cli._common import UsageError, emit, json_option, progress

__all__ = ["task"]


@click.group()
def task() -> None:
    """Make task folders from your own JAX functions."""


@task.command("new")
@click.option("--from", "function", required=True, metavar="FILE.py:FUNC|MODULE:FUNC",
              help="the JAX function to make a task of (its source is copied beside the task)")
@click.option("--arg", "args", multiple=True, required=True, metavar="DTYPE[DIMS]",
              help="one per positional argument, in order: bf16[8192,4096], f32[M=4096], i32[T=2048], bool[8,128]")
@click.option("--arg-gen", "gens", multiple=True, metavar="GEN",
              help="input generator per --arg, in order: normal (floats' default), uniform[:LO:HI], int:LO:HI "
                   "(HI exclusive; LO/HI may be a dim name, e.g. int:0:E), bool")
@click.option("--static", "static", multiple=True, metavar="NAME=VALUE", help="keyword argument bound on every call")
@click.option("--smoke", "smoke", multiple=True, metavar="DIM=INT", help="override a dim's derived smoke size")
@click.option("--config", "configs", multiple=True, metavar="NAME[:DIM=INT,...]",
              help="named configs, each judged (speedup is their geomean): the first names the --arg shapes "
                   "(--config prefill), the others override dims (--config decode:T=1)")
@click.option("--flops", default=None, type=click.IntRange(min=1), help="FLOPs at full size (default: XLA's count)")
@click.option("--name", default=None, help="task name (default: the --out folder's name)")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="the task folder to write")
@click.option("--force", is_flag=True, help="replace --out if it exists")
@json_option
def new(function: str, args: tuple[str, ...], gens: tuple[str, ...], static: tuple[str, ...], smoke: tuple[str, ...],
        configs: tuple[str, ...], flops: int | None, name: str | None, out: str, force: bool, as_json: bool) -> None:
    """Write a JAXBench-style task folder from FUNC and validate it: it traces at full size, a smoke size that runs
    on a CPU in seconds is derived, FLOPs and bytes come from XLA, the tolerance is calibrated from the function's
    own low-precision error, and no output may be matched by zeros, a constant or another seed's output. A refused
    function writes nothing and exits 2 with the reason."""
    import os

    # Validation runs the user's function here, on the CPU (the smoke size must run on a CPU in seconds); without
    # this jax would also start libtpu's runtime, which has no TPU to find.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from maxkernel.tasknew import SpecError, build_task

    progress(f"making a task of {function} in {out}")
    try:
        report = build_task(function, list(args), out, gens=list(gens), static=list(static), smoke=list(smoke),
                            flops=flops, name=name, force=force, configs=list(configs),
                            progress=lambda m: progress(f"  {m}"))
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    emit(as_json, report.model_dump(), report.summary)
    if not report.ok:
        raise click.exceptions.Exit(2)
