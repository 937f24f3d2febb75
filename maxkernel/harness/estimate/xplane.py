"""Reading a jax profiler XSpace (*.xplane.pb) into per-op tables for annotated regions of a trace.

What this relies on (jax 0.10.2, `jax.profiler.ProfileData`; only the CPU layout is tested on hardware):

- Host: the plane `/host:CPU`. `jax.profiler.TraceAnnotation(name)` shows as an event called `name` on the
  calling thread's line (`python` for the main thread). XLA:CPU runs one event per HLO thunk on its
  threadpool lines (`tf_XLAEigen/...`, `tf_XLAPjRtCpuClient/...`) with the stats `hlo_op` and `hlo_module`;
  thunks nest (a `while` holds its body), so times here are exclusive of nested events on the same line.
- TPU: planes `/device:TPU:<n>`, line `XLA Modules` (events named like `jit_kernel(12)`) and line `XLA Ops`
  (one event per HLO instruction, named by it: a Pallas kernel is its `custom-call.N`). Event-metadata stats
  (hlo_category, ...) are not exposed by ProfileData, so ops are matched by name and module by enclosing time.
- GPU: planes `/device:GPU:<n>`, lines `Stream #...` whose kernel events carry `hlo_op` and `hlo_module`
  stats (the raw CUPTI trace; derived `XLA Ops` lines appear only after XProf's conversion, and are used
  instead of the streams when present).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Event", "Line", "Plane", "OpEvent", "load", "find_traces", "annotation_windows", "op_events",
           "in_windows", "op_table", "DEVICE_PREFIX", "HOST_PLANE"]

HOST_PLANE = "/host:CPU"
DEVICE_PREFIX = "/device:"
_MODULE_SUFFIX = re.compile(r"\(\d+\)$")


@dataclass(frozen=True)
class Event:
    name: str
    start_ns: float
    duration_ns: float
    stats: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def end_ns(self) -> float:
        return self.start_ns + self.duration_ns


@dataclass
class Line:
    name: str
    events: list[Event]


@dataclass
class Plane:
    name: str
    lines: list[Line]
    stats: dict

    def line(self, name: str) -> Line | None:
        return next((ln for ln in self.lines if ln.name == name), None)

    @property
    def is_device(self) -> bool:
        return self.name.startswith(DEVICE_PREFIX)


def load(path: str | Path) -> list[Plane]:
    """All planes of one xplane.pb file, as plain Python objects."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(str(path))
    return [_plane(p) for p in data.planes]


def _plane(p) -> Plane:
    lines = [Line(ln.name, [Event(e.name, float(e.start_ns), float(e.duration_ns), dict(e.stats)) for e in ln.events])
             for ln in p.lines]
    return Plane(p.name, lines, dict(p.stats))


def find_traces(root: str | Path) -> list[Path]:
    """The xplane files jax.profiler.trace wrote under `root` (root/plugins/profile/<run>/<host>.xplane.pb)."""
    return sorted(Path(root).glob("plugins/profile/*/*.xplane.pb"))


def annotation_windows(planes: list[Plane], name: str) -> list[tuple[float, float]]:
    """(start, end) of every host TraceAnnotation called `name`, in time order."""
    out = [(e.start_ns, e.end_ns) for p in planes if p.name == HOST_PLANE
           for ln in p.lines for e in ln.events if e.name == name and not e.stats.get("hlo_op")]
    return sorted(out)


@dataclass(frozen=True)
class OpEvent:
    """One executed HLO op: where it ran, its own time (nested ops subtracted) and its module."""

    op: str
    module: str
    plane: str
    start_ns: float
    duration_ns: float
    self_ns: float


def op_events(planes: list[Plane]) -> list[OpEvent]:
    """Every HLO op execution in the trace: XLA:CPU thunks on the host, XLA ops on device planes."""
    out: list[OpEvent] = []
    for p in planes:
        if p.name == HOST_PLANE:
            for ln in p.lines:
                out += _with_self_time(p.name, [e for e in ln.events if e.stats.get("hlo_op")], {})
        elif p.is_device:
            modules = p.line("XLA Modules")
            spans = sorted((e.start_ns, e.end_ns, _MODULE_SUFFIX.sub("", e.name))
                           for e in (modules.events if modules else []))
            ops_line = p.line("XLA Ops")
            lines = [ops_line] if ops_line else p.lines
            for ln in lines:
                evs = ln.events if ln is ops_line else [e for e in ln.events if e.stats.get("hlo_op")]
                out += _with_self_time(p.name, evs, spans)
    return out


def _with_self_time(plane: str, events: list[Event], spans) -> list[OpEvent]:
    """Exclusive time per event: events on one line nest by time, a parent's time excludes its children's."""
    events = sorted(events, key=lambda e: (e.start_ns, -e.duration_ns))
    child_ns = [0.0] * len(events)
    stack: list[int] = []
    for i, e in enumerate(events):
        while stack and events[stack[-1]].end_ns <= e.start_ns:
            stack.pop()
        if stack:
            child_ns[stack[-1]] += e.duration_ns
        stack.append(i)
    out = []
    for e, kids in zip(events, child_ns):
        module = str(e.stats.get("hlo_module") or _enclosing(spans, e.start_ns) or "")
        op = str(e.stats.get("hlo_op") or e.name)
        out.append(OpEvent(op, module, plane, e.start_ns, e.duration_ns, max(e.duration_ns - kids, 0.0)))
    return out


def _enclosing(spans, t: float) -> str | None:
    for start, end, name in spans:
        if start <= t < end:
            return name
    return None


def in_windows(ev: OpEvent, windows: list[tuple[float, float]]) -> bool:
    return any(start <= ev.start_ns < end for start, end in windows)


def op_table(events: list[OpEvent], runs: int, total_ns: float, main_module: str = "") -> list[dict]:
    """Rows {name, time_ms, count, share} per op, per run, largest first; share is of `total_ns` (all runs).

    Ops of modules other than `main_module` (eager ops the TPU interpreter dispatches from callbacks) are
    named `module:op` so they are not mistaken for the kernel's own instructions.
    """
    time_ns: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for ev in events:
        name = ev.op if not main_module or ev.module in ("", main_module) else f"{ev.module}:{ev.op}"
        time_ns[name] += ev.self_ns
        count[name] += 1
    runs = max(runs, 1)
    rows = [{"name": n, "time_ms": t / runs / 1e6, "count": round(count[n] / runs, 2),
             "share": t / total_ns if total_ns > 0 else 0.0} for n, t in time_ns.items()]
    return sorted(rows, key=lambda r: -r["time_ms"])
