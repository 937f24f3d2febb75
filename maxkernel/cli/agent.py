"""`maxkernel optimize`: the autonomous agent on one task, headless, with progress on stderr."""

from __future__ import annotations

import click

from maxkernel.cli._common import (SIZES, UsageError, check_size, check_task, chip_option, emit, json_option, progress,
                                   resolve_chip, use_chip)

__all__ = ["optimize"]


@click.command()
@click.option("--task", required=True, help="a suite task name or a JAXBench-style task folder")
@click.option("--mode", default="auto", show_default=True, type=click.Choice(["auto", "hitl"]))
@click.option("--model", default=None, help="model for every agent: gemini-*, provider/model (LiteLLM), replay, or "
              "faulty (the replay with injected 429s, timeouts, bad tool calls)")
@click.option("--size", default=None, type=click.Choice(SIZES), help="smoke (default on a CPU) or full (default on a TPU)")
@chip_option(what="chip the kernel is written for (on attached TPU hardware, and in a resumed session, theirs wins)",
             allow_native=False)
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="folder for the best kernel (kernel.py) and its verdict.json")
@click.option("--session-uri", default=None, help="sqlite:///path (default), memory://, agentengine://ID, ...")
@click.option("--artifact-uri", default=None, help="file:///path (default), memory://, gs://bucket")
@click.option("--session-id", default=None, help="resume this session (created with this id if absent)")
@json_option
def optimize(task, mode, model, size, chip_name, out, session_uri, artifact_uri, session_id, as_json) -> None:
    """Run the autonomous agent on one task (HITL runs in adk web). Exit 0 when the run ends with a kernel judged
    correct on held-out seeds, 1 when it ends without one, 2 usage."""
    chip = resolve_chip(chip_name, allow_native=False)
    if size:
        check_size(check_task(task), size)
    else:
        check_task(task)
    from maxkernel.optimize import OptimizeError, render_text, run_optimize

    use_chip(chip)  # the loop's compiles, verdicts and estimates read the settings' chip
    try:
        r = run_optimize(task, mode=mode, model=model, size=size, out=out, session_uri=session_uri,
                         artifact_uri=artifact_uri, session_id=session_id, progress=progress)
    except OptimizeError as exc:
        raise UsageError(str(exc)) from None
    emit(as_json, r, render_text(r), ok=r["status"] == "correct")
