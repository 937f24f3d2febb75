"""`maxkernel report DIR`: a bench-agent results folder as Markdown and HTML with PNG plots, the field's way."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from maxkernel.bench_agent import load_records
from maxkernel.evals import sources
from maxkernel.evals.stats import FAST_P, fast_key, summarize

__all__ = ["ReportError", "render_report", "CPU_WARNING"]

CPU_WARNING = ("These results were measured on a CPU. Kernel times are wall times of the Pallas TPU interpreter "
               "and baseline times are XLA:CPU: every speedup, fast_p value and roofline fraction below says "
               "nothing about TPU kernel performance. Only correctness carries over.")
REPLAY_WARNING = ("Model: the offline replay model (recorded model turns, real tools and harness verdicts). "
                  "LLM calls and tokens are the recording's; its cost is zero by construction.")


class ReportError(ValueError):
    """The folder holds no task records."""


# -- formatting ------------------------------------------------------------------------------------------------
def _x(v, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}g}x"


def _num(v, digits: int = 3) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.{digits}g}"


def _usd(v) -> str:
    return "unknown" if v is None else f"${v:,.4f}"


def _share(group: dict, p: float) -> str:
    """A fast_p share over the rows it covers (the tasks of its source and the failed ones)."""
    v, n = group[fast_key(p)], len(group["rows"])
    return "—" if v is None else f"{v:.0%} ({round(v * n)}/{n})"


def _result(r: dict) -> str:
    if r.get("correct") and r.get("uses_library_kernel"):  # the speed is the library's, not the agent's work
        return f"correct (calls library kernel {r['uses_library_kernel']})"
    return "correct" if r.get("correct") else (r.get("failure") or "failed")


def _speed(r: dict) -> str:
    if r.get("speedup") is None:
        return "—"
    lo, hi = r.get("speedup_low"), r.get("speedup_high")
    return _x(r["speedup"]) + (f" [{lo:.3g}–{hi:.3g}]" if lo is not None and hi is not None else "")


# -- plots -----------------------------------------------------------------------------------------------------
def _panels(records: list[dict], summary: dict) -> list[tuple[str | None, list[dict]]]:
    """One plot panel per speedup source, the headline's first with the failed tasks; never two sources on an axis."""
    headline = summary["source"]
    panels = [(headline, [r for r in records if not r.get("correct") or sources.rank_source(r) == headline])]
    for apart in summary["apart"]:
        if apart["source"] is not None:  # a kernel the harness declined to rank has no speedup to plot
            rows = set(apart["rows"])
            panels.append((apart["source"], [r for r in records if r.get("correct") and r["task"] in rows]))
    return panels


def _panel_title(source: str | None, summary: dict, what: str) -> str:
    role = "headline figures" if source == summary["source"] else "apart: not folded into the headline figures"
    cpu = "\nPallas interpreter vs XLA:CPU wall time, not TPU performance" if source == sources.CPU else ""
    return f"{what}, {sources.label(source)}\n({role}){cpu}"


def _plots(records: list[dict], summary: dict, folder: Path, stem: str) -> tuple[list[tuple[Path, str]], list[dict]]:
    """The two plots, one panel per source each; also what each panel's axis says and which tasks it shows."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt

    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    colors = {"p": "#1f77b4", "k": "#ff7f0e"}
    times = FuncFormatter(lambda v, _pos: f"{v:g}x")
    # Minor ticks labelled only at 2 and 5 of each decade, so a log axis stays readable.
    some = FuncFormatter(lambda v, _pos: f"{v:g}x" if v > 0 and round(v / 10 ** math.floor(math.log10(v))) in (2, 5)
                         else "")
    legend = [Line2D([], [], color=c, marker="s", linestyle="", label=f"tier {t}") for t, c in colors.items()
              if any(r.get("tier") == t for r in records)]
    legend += [Line2D([], [], color="#d62728", marker="x", linestyle="", label="no correct kernel"),
               Line2D([], [], color="black", linestyle="--", label="XLA baseline (1x)")]
    panels = _panels(records, summary)
    said: list[dict] = []

    def value(r: dict) -> float | None:
        return sources.ranked(r)[0] if r.get("correct") else None

    def axis(ax, source) -> None:
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(times)
        ax.yaxis.set_minor_formatter(some)
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_ylabel(f"speedup vs XLA ({sources.label(source)}), log scale", fontsize=8)
        ax.legend(handles=legend, fontsize=8)

    width = max(6.0, 0.35 * max(len(rows) for _, rows in panels) + 2)
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 4.5 * len(panels)), squeeze=False)
    for ax, (source, rows) in zip(axes[:, 0], panels):
        low = min([value(r) for r in rows if value(r)] + [1.0]) / 4
        for i, r in enumerate(rows):
            s = value(r)
            if s:
                # The spread comes from the harness's timings: it belongs to the measured speedup only.
                timed = source == sources.measured_source(r)
                err = [[s - (r.get("speedup_low") or s)], [(r.get("speedup_high") or s) - s]] if timed else None
                ax.bar(i, s, color=colors.get(r.get("tier"), "#7f7f7f"), yerr=err, capsize=3)
            else:
                ax.plot(i, low, marker="x", color="#d62728", markersize=9)
        ax.set_xticks(range(len(rows)), [r["task"] for r in rows], rotation=60, ha="right", fontsize=8)
        axis(ax, source)
        ax.set_title(_panel_title(source, summary, "Speedup per task"), fontsize=9)
    speed_png = folder / f"{stem}_speedup_per_task.png"
    said += [_said(speed_png, source, rows, ax) for ax, (source, rows) in zip(axes[:, 0], panels)]
    fig.tight_layout()
    fig.savefig(speed_png, dpi=110)
    plt.close(fig)

    priced = all(r.get("cost_usd") is not None for r in records) and any(r.get("cost_usd") for r in records)
    key, label = ("cost_usd", "cost per task (USD)") if priced else ("tokens", "tokens per task (no priced cost)")
    fig, axes = plt.subplots(len(panels), 1, figsize=(6.0, 4.5 * len(panels)), squeeze=False)
    for ax, (source, rows) in zip(axes[:, 0], panels):
        low = min([value(r) for r in rows if value(r)] + [1.0]) / 4
        for r in rows:
            x = r.get(key)
            if x is None:
                continue
            y = value(r) or low
            ax.scatter(x, y, color=colors.get(r.get("tier"), "#7f7f7f") if y != low else "#d62728",
                       marker="o" if y != low else "x")
            ax.annotate(r["task"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel(label)
        axis(ax, source)
        ax.set_title(_panel_title(source, summary, "Cost vs speedup"), fontsize=9)
    cost_png = folder / f"{stem}_cost_vs_speedup.png"
    said += [_said(cost_png, source, rows, ax) for ax, (source, rows) in zip(axes[:, 0], panels)]
    fig.tight_layout()
    fig.savefig(cost_png, dpi=110)
    plt.close(fig)
    return [(speed_png, "Speedup per task"), (cost_png, "Cost vs speedup")], said


def _said(png: Path, source: str | None, rows: list[dict], ax) -> dict:
    return {"plot": str(png), "source": source, "ylabel": ax.get_ylabel(), "title": ax.get_title(),
            "rows": [r["task"] for r in rows]}


# -- the document ------------------------------------------------------------------------------------------------
def _sources_paragraph(summary: dict) -> str:
    src = summary["source_label"]
    text = (f"Every figure below combines speedups of one source. Headline figures (fast_p, geomeans, vs reference) "
            f"are by: {src} ({len(summary['figures']['geomean_speedup']['rows'])} correct kernels; recorded as: "
            f"{summary['speedup_source']}).")
    if summary["source"] == sources.ESTIMATE:
        text += (" Estimated TPU speedups come from libtpu's static profile on shrunk shapes, floored by the "
                 "roofline: estimates, not measurements.")
    if summary["apart"]:
        text += (" Kernels ranked by another source are listed apart under \"Other speedup sources\", not folded "
                 "into these figures: " + "; ".join(f"{a['source_label']}: {', '.join(a['rows'])}"
                                                    for a in summary["apart"]) + ".")
    return text


def _measured_label(records: list[dict]) -> str:
    found = sources.ordered(sources.measured_source(r) for r in records if r.get("correct"))
    return ", ".join(sources.label(s) for s in found) or "measured"


def _apart_blocks(records: list[dict], summary: dict) -> list[tuple]:
    """The kernels ranked by another source than the headline's: their own figures, one source each."""
    if not summary["apart"]:
        return []
    b: list[tuple] = [("h2", "Other speedup sources (not folded into the figures above)")]
    for a in summary["apart"]:
        lab = a["source_label"]
        if a["source"] is None:
            why = {r["task"]: r.get("rank_label") for r in records if r["task"] in set(a["rows"])}
            b.append(("p", "Not ranked (no figure): " + "; ".join(f"{t} ({w})" for t, w in why.items())))
            continue
        b.append(("table", ["tasks", f"geomean ({lab})", f"median ({lab})", f"min–max ({lab})",
                            f"{fast_key(1.0)} ({lab})", f"geomean vs reference kernel ({lab})"],
                  [[", ".join(a["rows"]), _x(a["geomean_speedup"]), _x(a["median_speedup"]),
                    "—" if a["speedup_min"] is None else f"{a['speedup_min']:.3g}–{a['speedup_max']:.3g}x",
                    _share(a, 1.0), _ref(a)]]))
        if a["vs_reference_na"]:
            b.append(("p", f"Not in its vs-reference geomean ({lab}): "
                           + "; ".join(f"{t}: {why}" for t, why in a["vs_reference_na"].items())))
    return b


def _ref(g: dict) -> str:
    return _x(g["geomean_speedup_vs_reference"]) + (f" (n={g['with_reference']})" if g["with_reference"] else "")


def _task_table(records: list[dict], summary: dict) -> tuple:
    """Per task, each speedup in the column of its source; "vs reference" at the source the task is ranked by."""
    timed = sources.ordered(sources.measured_source(r) for r in records if r.get("speedup") is not None)
    estimated = any(r.get("estimated_speedup") for r in records)
    ranked = sources.ordered([summary["source"]] + [a["source"] for a in summary["apart"]]) if any(
        r.get("correct") for r in records) else []
    head = ["task", "tier", "result", "ranked by"]
    head += [f"speedup [spread] ({sources.label(s)})" for s in timed]
    head += ["speedup (TPU estimate)"] if estimated else []
    head += [f"vs reference ({sources.label(s)})" for s in ranked if s is not None]
    head += ["roofline (measured time)", "iterations", "LLM calls", "tokens", "cost", "wall (s)"]
    rows = []
    for r in records:
        mine = sources.rank_source(r) if r.get("correct") else None
        row = [r["task"], r.get("tier", ""), _result(r),
               "—" if not r.get("correct") else sources.label(mine) if mine else "not ranked"]
        row += [_speed(r) if sources.measured_source(r) == s else "—" for s in timed]
        if estimated:
            row.append(_x(r.get("estimated_speedup")) + (f" ({r['estimate_chip']})" if r.get("estimated_speedup")
                                                         and r.get("estimate_chip") else ""))
        value, _, why = sources.vs_reference(r) if r.get("correct") else (None, None, "")
        row += [(why or _x(value)) if s == mine else "—" for s in ranked if s is not None]
        row += [_num(r.get("roofline_fraction")), _num(r.get("iterations")), _num(r.get("llm_calls")),
                _num(r.get("tokens")), _usd(r.get("cost_usd")), _num(r.get("wall_s"))]
        rows.append(row)
    return ("table", head, rows)


def _blocks(records: list[dict], summary: dict, meta: dict, plots: list[tuple[Path, str]]) -> list[tuple]:
    tiers = sorted(summary["by_tier"], key=lambda t: ("pk".find(t) % 3, t))  # p, then k, then anything else
    groups = [(t, summary["by_tier"][t]) for t in tiers] + [("all", summary)]
    models = sorted({str(r.get("model")) for r in records if r.get("model")}) or [str(meta.get("model"))]
    chips = sorted({r.get("chip") for r in records if r.get("chip")})
    src = summary["source_label"]
    b: list[tuple] = [("h1", "maxkernel agent benchmark")]
    if summary["cpu_timing"]:
        b.append(("warn", CPU_WARNING))
    if any(r.get("replay") for r in records):
        b.append(("warn", REPLAY_WARNING))
    b.append(("p", f"{len(records)} tasks; mode {meta.get('mode') or records[0].get('mode')}; model "
                   f"{', '.join(models)}; size {records[0].get('size')}; backend {', '.join(summary['backends']) or '—'}"
                   f"{'; roofline chip ' + ', '.join(chips) if chips else ''}. Verdicts are the trusted harness's on "
                   f"held-out seeds the agent never saw ({records[0].get('seeds') or 'see records'})."))

    if summary.get("speedup_source"):
        b.append(("p", _sources_paragraph(summary)))
    b.append(("h2", f"fast_p: correct and faster than XLA by more than p, by {src}"))
    apart = [("apart (other source)", lambda g: str(g["tasks"] - len(g["rows"])))] if summary["apart"] else []
    b.append(("table", ["tier", "tasks", "correct", *[h for h, _ in apart],
                        *[f"{fast_key(p)} ({src})" for p in FAST_P]],
              [[t, str(g["tasks"]), str(g["correct"]), *[f(g) for _, f in apart], *[_share(g, p) for p in FAST_P]]
               for t, g in groups]))

    if len(summary.get("by_suite") or {}) > 1:
        suites = list(summary["by_suite"].items())
        rows = [["tasks", *[str(g["tasks"]) for _, g in suites]], ["correct", *[str(g["correct"]) for _, g in suites]]]
        rows += [[f"{fast_key(p)} ({src})", *[_share(g, p) for _, g in suites]] for p in FAST_P]
        rows.append([f"geomean speedup ({src})", *[_x(g["geomean_speedup"]) for _, g in suites]])
        b.append(("h2", "The suites side by side"))
        b.append(("table", ["", *[name for name, _ in suites]], rows))
    if meta.get("skipped"):
        b.append(("p", f"Skipped ({len(meta['skipped'])}), not counted above: "
                       + "; ".join(f"{x['task']} ({x['reason']})" for x in meta["skipped"])[:2000]))

    b.append(("h2", f"Speedup over the XLA baseline (correct kernels, {src})"))
    b.append(("table", ["tier", f"geomean ({src})", f"median ({src})", f"IQR ({src})", f"min–max ({src})",
                        f"geomean vs reference kernel ({src})",
                        f"median roofline fraction ({_measured_label(records)})"],
              [[t, _x(g["geomean_speedup"]), _x(g["median_speedup"]),
                "—" if g["speedup_q1"] is None else f"{g['speedup_q1']:.3g}–{g['speedup_q3']:.3g}x",
                "—" if g["speedup_min"] is None else f"{g['speedup_min']:.3g}–{g['speedup_max']:.3g}x",
                _ref(g), _num(g["median_roofline_fraction"])] for t, g in groups]))
    if summary["vs_reference_na"]:
        b.append(("p", "Not in the vs-reference geomean (the agent's and the reference kernel's speedups are of "
                       "different sources): "
                       + "; ".join(f"{t}: {why}" for t, why in summary["vs_reference_na"].items())))
    b.append(("p", "Per-task spread: speedups are medians of interleaved runs; brackets in the task table give "
                   "baseline q1 / kernel q3 to baseline q3 / kernel q1. Differences inside the spread are none."))
    b += _apart_blocks(records, summary)

    b.append(("h2", "Failures"))
    fail_rows = [[f, str(n), ", ".join(r["task"] for r in records if r.get("failure") == f)]
                 for f, n in summary["failures"].items() if n]
    b.append(("table", ["category", "tasks", "which"], fail_rows or [["none", "0", ""]]))

    b.append(("h2", "Cost"))
    s = summary
    b.append(("table", ["", "LLM calls", "tokens", "cost", "wall time (s)"],
              [["total", _num(s["llm_calls"]), _num(s["tokens"]), _usd(s["cost_usd"]), _num(s["wall_s"])],
               ["per task", _num(s["llm_calls_per_task"]), _num(s["tokens_per_task"]), _usd(s["cost_usd_per_task"]),
                _num(s["wall_s_per_task"])],
               [f"per correct-and-faster kernel ({s['fast_kernels']}, by {src})", _num(s["llm_calls_per_fast_kernel"]),
                _num(s["tokens_per_fast_kernel"]),
                _usd(s["cost_usd_per_fast_kernel"]) if s["fast_kernels"] else "—",  # none to divide by
                _num(s["wall_s_per_fast_kernel"])]]))

    b.append(("h2", "Plots"))
    for path, alt in plots:
        b.append(("img", path.name, alt))

    b.append(("h2", "Tasks"))
    b.append(_task_table(records, summary))
    reasons = [(r["task"], r.get("reason", "")) for r in records if not r.get("correct")]
    if reasons:
        b.append(("h2", "Why tasks failed"))
        b.append(("table", ["task", "reason"], [[t, (why or "").splitlines()[0][:300] if why else ""]
                                                for t, why in reasons]))
    return b


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _markdown(blocks: list[tuple]) -> str:
    out = []
    for kind, *rest in blocks:
        if kind == "h1":
            out.append(f"# {rest[0]}")
        elif kind == "h2":
            out.append(f"## {rest[0]}")
        elif kind == "p":
            out.append(rest[0])
        elif kind == "warn":
            out.append(f"> **Warning:** {rest[0]}")
        elif kind == "img":
            out.append(f"![{rest[1]}]({rest[0]})")
        elif kind == "table":
            head, rows = rest
            out.append("\n".join(["| " + " | ".join(map(_cell, head)) + " |", "|" + "---|" * len(head),
                                  *["| " + " | ".join(map(_cell, row)) + " |" for row in rows]]))
    return "\n\n".join(out) + "\n"


def _html(blocks: list[tuple]) -> str:
    e = html.escape
    body = []
    for kind, *rest in blocks:
        if kind in ("h1", "h2"):
            body.append(f"<{kind}>{e(rest[0])}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{e(rest[0])}</p>")
        elif kind == "warn":
            body.append(f'<p class="warn"><strong>Warning:</strong> {e(rest[0])}</p>')
        elif kind == "img":
            body.append(f'<figure><img src="{e(rest[0])}" alt="{e(rest[1])}"><figcaption>{e(rest[1])}</figcaption></figure>')
        elif kind == "table":
            head, rows = rest
            body.append("<table><thead><tr>" + "".join(f"<th>{e(str(h))}</th>" for h in head) + "</tr></thead><tbody>"
                        + "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in rows)
                        + "</tbody></table>")
    style = ("body{font-family:sans-serif;max-width:75em;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;"
             "text-align:left}.warn{background:#fff3cd;border:2px solid #d39e00;padding:.8em;font-size:1.1em}"
             "img{max-width:100%}")
    return (f'<!doctype html>\n<html><head><meta charset="utf-8"><title>maxkernel agent benchmark</title>'
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def render_report(results_dir: str | Path, out_file: str | Path | None = None) -> dict:
    """Write the report for a `bench agent` folder: Markdown and HTML side by side, plots beside them.

    `out_file` names the Markdown (or, ending in .html, the HTML) file; default DIR/report.md.
    Returns the paths written, each plot panel's source, axis label and tasks, and the summary the report states
    (every figure in it with its source and the rows it covers).
    """
    folder = Path(results_dir)
    records = load_records(folder)
    if not records:
        raise ReportError(f"no finished task records under {folder / 'records'} (run `maxkernel bench agent` first)")
    meta_file = folder / "meta.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    target = Path(out_file) if out_file else folder / "report.md"
    md_path = target.with_suffix(".md") if target.suffix == ".html" else target
    html_path = target if target.suffix == ".html" else target.with_suffix(".html")
    md_path.parent.mkdir(parents=True, exist_ok=True)
    summary = summarize(records)
    plots, panels = _plots(records, summary, md_path.parent, md_path.stem)
    blocks = _blocks(records, summary, meta, plots)
    md_path.write_text(_markdown(blocks), encoding="utf-8")
    html_path.write_text(_html(blocks), encoding="utf-8")
    return {"markdown": str(md_path), "html": str(html_path), "plots": [str(p) for p, _ in plots],
            "plot_panels": panels, "summary": summary, "cpu_timing": summary["cpu_timing"]}
