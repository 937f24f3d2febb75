"""`maxkernel report DIR`: a `bench agent` results folder as Markdown and HTML with plots, or a `bench kernels`
folder as its table with fast_p by estimate per chip."""

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
    if (Path(folder) / "kernels.json").is_file():  # a `bench kernels` folder: its table, by estimate, per chip
        return _kernel_table(folder, as_json)
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


def _kernel_table(folder: str, as_json: bool) -> None:
    from maxkernel.evals.stats import FAST_P, fast_key
    from maxkernel.kernel_table import TableError, expert_line, render_table

    try:
        doc = render_table(folder)
    except TableError as exc:
        raise UsageError(str(exc)) from None
    lines = [f"wrote {doc['files']['markdown']}", f"wrote {doc['files']['plot']}",
             f"fast_p by estimate ({doc['label']}):"]
    for chip, parts in doc["summary"]["by_chip"].items():
        for part, f in parts.items():
            geo = f"{f['geomean_speedup']:.3g}x" if f["geomean_speedup"] else "—"
            lines.append(f"  {chip}{'' if part == 'all' else f' {part}'}: {f['correct']}/{f['tasks']} correct; "
                         + " ".join(f"{fast_key(p)} " + ("—" if f[fast_key(p)] is None else f"{f[fast_key(p)]:.0%}")
                                    for p in FAST_P)
                         + f"; geomean speedup {geo} over {f['estimated']} estimated"
                         + (f"; too rough to count: {', '.join(sorted(f['rough']))}" if f.get("rough") else ""))
            if part == "all" and expert_line(chip, f.get("vs_expert")):
                lines.append("  " + expert_line(chip, f["vs_expert"]))
    if doc["summary"].get("degenerate"):
        lines.append("  left out as degenerate: " + "; ".join(f"{t} ({why})" for t, why in
                                                              sorted(doc["summary"]["degenerate"].items())))
    emit(as_json, doc, "\n".join(lines))
