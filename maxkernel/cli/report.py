"""`maxkernel report DIR`: a `bench agent` results folder as Markdown and HTML with plots."""

from __future__ import annotations

from pathlib import Path

import click

from maxkernel.cli._common import UsageError, emit, json_option

__all__ = ["report"]


@click.command()
@click.argument("folder", metavar="DIR", type=click.Path())
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="Markdown file (or .html); the other format is written beside it")
@json_option
def report(folder: str, out: str | None, as_json: bool) -> None:
    """Render bench agent results as Markdown/HTML with plots."""
    from maxkernel.report import ReportError, render_report

    if not Path(folder).is_dir():
        raise UsageError(f"results folder not found: {folder}")
    try:
        doc = render_report(folder, out)
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    text = f"wrote {doc['markdown']}\nwrote {doc['html']}\n" + "\n".join(f"wrote {p}" for p in doc["plots"])
    s = doc["summary"]
    if s["speedup_source"]:
        text += f"\nheadline figures by {s['source_label']} ({len(s['figures']['geomean_speedup']['rows'])} kernels)"
        text += "".join(f"; apart, not folded in: {a['source_label']} ({', '.join(a['rows'])})" for a in s["apart"])
    if doc["cpu_timing"]:
        text += "\nnote: CPU results: speedups are interpreter timings, and the report says so"
    emit(as_json, doc, text)
