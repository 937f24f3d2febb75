"""Sandbox job that never imports candidate code: libtpu's static profile of programs already lowered.

The candidate's process (estimate_job) only traces and lowers the program at each profiled size and writes each
lowering's StableHLO text. This job parses those texts, compiles them deviceless with libtpu's profile dump on, and
reads the profile, the scheduled HLO's 0-cycle bytes and its loops' trip counts itself: a kernel that patches the
profiler's output, the parser or the progress records in its own process changes nothing here. libtpu reads its
flags once, when it loads, so this runs in a fresh worker and sets them before the first compile.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from maxkernel.harness.estimate.facts import PROFILE_PROGRESS_FILE as PROGRESS_FILE

__all__ = ["run", "PROGRESS_FILE"]

DUMP_DIR = "llo_profile"


def run(job: dict, scratch: Path) -> dict:
    """job: {chip, libtpu_flags, points: [{dims, x, tiles, work, file (a lowering's text in scratch)}]}."""
    dump = Path(scratch) / DUMP_DIR
    dump.mkdir(exist_ok=True)
    flags = [f"--xla_jf_dump_static_llo_profile_to={dump}", *job.get("libtpu_flags", [])]
    os.environ["LIBTPU_INIT_ARGS"] = " ".join(flags)  # read once, when libtpu loads: before the first compile
    from maxkernel import chips as chips_mod
    from maxkernel.harness.jobs import compile_job
    from maxkernel.harness.estimate.facts import libtpu_version
    from maxkernel.harness.jobs.estimate_job import linear
    from maxkernel.harness.hints.diagnose import hint_for

    chip = chips_mod.get(job["chip"])
    device = compile_job._topology_device(chip)
    if isinstance(device, str):
        return {"status": "error", "stage": "compile", "error": device}
    progress = Path(scratch) / PROGRESS_FILE
    done: list[dict] = []
    for point in job["points"]:
        # Three sizes on one line are enough; a bend (the pipeline not yet in its steady state at a few tiles)
        # brings in the next larger size, and the fit then uses the largest three.
        sized = [d for d in done if "part" not in d and not d.get("glue")]
        if "part" not in point and not point.get("glue") and len(sized) >= 3 and linear(sized):
            continue  # a split plan's points are all needed, and so is the glue at full size
        # A split plan's point is one pallas_call at a cut grid, all at the full size's dims: named by part and grid.
        _line(progress, {"starting": {"pallas_call": point["part"], "grid": point["grid"]} if "part" in point
                         else {"glue": point["dims"]} if point.get("glue") else point["dims"]})
        try:
            text = (Path(scratch) / point["file"]).read_text()
            got = profiled_compile(text, device, dump)
        except Exception as exc:  # noqa: BLE001  (libtpu's errors: VMEM overflow, unsupported ops)
            full = str(exc)
            return {"status": "error", "stage": "compile", "error": compile_job.trim_error(exc),
                    "hint": hint_for(full, chip), "vmem_bytes": compile_job.vmem_from_error(full)}
        done.append({**{k: v for k, v in point.items() if k != "file"}, **got})
        _line(progress, {"point": done[-1]})
    return {"status": "ok", "libtpu": libtpu_version()}


def profiled_compile(text: str, device, dump: Path) -> dict:
    """Compile one lowering (StableHLO text) for `device` and read what libtpu's static profile says of it:
    {ops: {HLO op: cycles}, zero_cycle_bytes, zero_cycle_model (XLA's cost model's cycles for 0-cycle ops),
    zero_cycle_dma (their DMA types, as the profile names them), trips, loops, compile_s}."""
    import numpy as np
    from jax._src import compiler
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client as xc

    from maxkernel.harness.estimate import hlo_loops
    from maxkernel.harness.jobs.estimate_job import model_cycles, parse_dma, parse_profile, zero_cycle_bytes

    for old in dump.glob("*"):
        old.unlink()
    t0 = time.perf_counter()
    with mlir.make_ir_context():
        module = mlir.ir.Module.parse(text)
        options = compiler.get_compile_options(num_replicas=1, num_partitions=1,
                                               device_assignment=np.array([[device]]))
        exe = compiler.backend_compile_and_load(device.client, module, xc.DeviceList((device,)), options, [])
    compile_s = time.perf_counter() - t0
    profile = "\n".join(p.read_text(errors="replace") for p in sorted(dump.glob("*static_llo_profile*")))
    ops = parse_profile(profile)
    hlo = "\n".join(m.to_string() for m in exe.hlo_modules())
    unpriced = [n for n, c in ops.items() if c == 0]
    zero = zero_cycle_bytes(hlo, unpriced)
    # The profile prices each op once; an op inside a while loop runs once per trip (hlo_loops).
    trips, loops = hlo_loops.op_trips(hlo)
    kernels = re.findall(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*custom_call_target=\"tpu_custom_call\"", hlo, re.M)
    sorts = re.findall(r"^\s*(?:ROOT\s+)?%([\w.\-]+) = (?:\(.*?\)|\S+) sort\(", hlo, re.M)
    outside = sorted((n for n, c in ops.items() if c > 0 and n not in kernels),
                     key=lambda n: -ops[n] * trips.get(n, 1))[:OUTSIDE_OPS]
    dma = parse_dma(profile)
    return {"ops": ops, "zero_cycle_bytes": zero, "zero_cycle_model": model_cycles(hlo, unpriced),
            "zero_cycle_dma": {n: dma[n] for n in unpriced if n in dma},
            "compile_s": compile_s, "profile_files": len(list(dump.glob("*"))),
            "kernel_ops": sorted(set(kernels) & set(ops)), "sort_ops": sorted(set(sorts) & set(ops)),
            "op_layouts": op_layouts(hlo, outside) if kernels else {},
            "trips": {n: t for n, t in trips.items() if n in ops},
            "loops": [{"name": lp["name"], "trip_count": lp["trip_count"], "why": lp["why"]} for lp in loops]}


OUTSIDE_OPS = 5  # the costliest XLA ops beside a kernel whose shapes and layouts are read (estimator._outside_line)
_OP_LINE = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+) = (\w+\[[\d,]*\])(\{[^}]*\})? ([\w\-]+)\(([^)]*)\)", re.M)
_PASS_THROUGH = ("bitcast", "get-tuple-element")  # an operand seen through these is where its data comes from


def op_layouts(hlo: str, names: list[str]) -> dict:
    """What the named ops are, from the optimised HLO: {name: {opcode, shape, layout (minor to major, with its
    tiling), root (the program's result), sources: [{opcode, shape, layout, parameter}]}}, each operand followed
    through bitcasts to the op that made it (a kernel's custom-call, an argument's parameter)."""
    lines = {m.group(2): m for m in _OP_LINE.finditer(hlo)}

    def source(name: str) -> dict:
        for _ in range(8):
            m = lines.get(name)
            if m is None:
                return {"opcode": None, "shape": None, "layout": None, "parameter": None}
            inner = re.findall(r"%([\w.\-]+)", m.group(6))
            if m.group(5) not in _PASS_THROUGH or not inner:
                break
            name = inner[0]
        arg = re.fullmatch(r"\s*(\d+)\s*", m.group(6)) if m.group(5) == "parameter" else None
        return {"opcode": m.group(5), "shape": m.group(3), "layout": m.group(4) or "",
                "parameter": int(arg.group(1)) if arg else None}

    out = {}
    for n in names:
        m = lines.get(n)
        if m is None:  # a tuple-shaped fusion and the like: its cycles are named, its layout is not read
            continue
        out[n] = {"opcode": m.group(5), "shape": m.group(3), "layout": m.group(4) or "", "root": bool(m.group(1)),
                  "sources": [source(o) for o in re.findall(r"%([\w.\-]+)", m.group(6))]}
    return out


def _line(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record, default=str) + "\n")
        f.flush()
