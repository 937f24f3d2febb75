"""A picture of a search graph: one self-contained HTML file with an inline SVG tree, nodes coloured by verdict
and labelled with their speedup (hover a node for its strategy and verdict)."""

from __future__ import annotations

import html
import os
from pathlib import Path

from maxkernel.search.graph import VERDICT_COLOURS, Graph, Node

__all__ = ["write_html", "render_html", "layout"]

_DX, _DY, _R, _PAD = 64, 92, 17, 40


def layout(nodes: list[Node]) -> dict[int, tuple[float, float]]:
    """(x, y) per node id: leaves spaced evenly in depth-first order, each parent centred over its children;
    y by depth, the task itself being the row above the first kernels."""
    kids: dict[int | None, list[Node]] = {}
    ids = {n.id for n in nodes}
    for n in nodes:
        kids.setdefault(n.parent if n.parent in ids else None, []).append(n)
    pos: dict[int, tuple[float, float]] = {}
    next_leaf = [0]

    def place(n: Node, depth: int) -> float:
        children = kids.get(n.id, [])
        if children:
            x = sum(place(c, depth + 1) for c in children) / len(children)
        else:
            x = next_leaf[0] * _DX
            next_leaf[0] += 1
        pos[n.id] = (x, depth * _DY)
        return x

    for root in kids.get(None, []):
        place(root, 1)
    return pos


def render_html(graph: Graph, title: str = "search") -> str:
    nodes = graph.nodes()
    t = graph.totals()
    pos = layout(nodes)
    width = max([x for x, _ in pos.values()] + [0]) + 2 * _PAD
    height = max([y for _, y in pos.values()] + [0]) + _DY
    root_x = (max([x for x, _ in pos.values()] + [0])) / 2
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="{-_PAD} {-_PAD // 2} {width:.0f} {height:.0f}" font-family="sans-serif" font-size="11">']
    for n in nodes:  # edges first, so nodes draw over them
        x, y = pos[n.id]
        px, py = pos.get(n.parent, (root_x, 0)) if n.parent is not None else (root_x, 0)
        svg.append(f'<line x1="{px:.1f}" y1="{py:.1f}" x2="{x:.1f}" y2="{y:.1f}" stroke="#bbb" stroke-width="1.5"/>')
    svg.append(f'<rect x="{root_x - 34:.1f}" y="-12" width="68" height="24" rx="6" fill="#eef" stroke="#99b"/>'
               f'<text x="{root_x:.1f}" y="4" text-anchor="middle">task</text>')
    for n in nodes:
        x, y = pos[n.id]
        fill = VERDICT_COLOURS.get(n.verdict if n.status == "done" else None, "#ccc")
        stroke, sw, dash = "#333", 1.2, ""
        if n.status == "running":
            stroke, sw = "#1a73e8", 3
        elif n.status in ("pending", "cancelled"):
            dash = ' stroke-dasharray="3,3"'
        if n.pinned:
            stroke, sw = "#f4b400", 4
        if n.id == t["best"]:
            stroke, sw = "#0b5394", 4.5
        opacity = ' opacity="0.35"' if n.pruned else ""
        speed = f"{n.speedup:.2f}x" if n.speedup is not None else (n.verdict or n.status)
        tip = html.escape(f"node {n.id} (gen {n.gen}, island {n.island}) {n.strategy}\n{n.status} {n.verdict or ''} "
                          f"{n.stage or ''}\n{(n.note or '').splitlines()[0][:200] if n.note else ''}")
        svg.append(f'<g{opacity}><title>{tip}</title><circle cx="{x:.1f}" cy="{y:.1f}" r="{_R}" fill="{fill}" '
                   f'stroke="{stroke}" stroke-width="{sw}"{dash}/>'
                   f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle" fill="#fff" font-weight="bold">{n.id}</text>'
                   f'<text x="{x:.1f}" y="{y + _R + 13:.1f}" text-anchor="middle">{html.escape(speed)}</text></g>')
    svg.append("</svg>")
    legend = "".join(f'<span class="k"><i style="background:{c}"></i>{html.escape(k or "not run")}</span>'
                     for k, c in VERDICT_COLOURS.items())
    best = f"best: node {t['best']} at {t['best_speedup']:.3g}x" if t["best"] is not None else "no correct kernel yet"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>
body{{font-family:sans-serif;margin:16px;color:#222}} .k{{margin-right:12px;white-space:nowrap}}
.k i{{display:inline-block;width:11px;height:11px;border-radius:6px;margin-right:4px;border:1px solid #333}}
.svgbox{{overflow:auto;border:1px solid #ddd;margin-top:8px}}</style></head><body>
<h2>{html.escape(title)}</h2>
<p>{t['nodes']} nodes ({t['done']} done, {t['running']} running, {t['pending']} pending) · {t['correct']} correct ·
{html.escape(best)} · {t['tokens']} tokens · ${t['cost_usd']:.4f}. Labels: speedup vs the XLA baseline on the
search's scoring seeds (off a TPU: the estimated TPU speedup, libtpu's static profile; estimates, not measurements). Thick blue ring: best; gold: pinned; faded: pruned; dashed: not started.</p>
<p>{legend}</p><div class="svgbox">{''.join(svg)}</div></body></html>
"""


def write_html(graph: Graph, dest: str | Path, title: str = "search") -> Path:
    dest = Path(dest)
    tmp = dest.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(render_html(graph, title))
    tmp.replace(dest)
    return dest
