"""HBM need of every jaxbench XLA baseline at full size: deviceless TPU compiles, one subprocess each (GB = 1e9 bytes).

Each (task, chip) compile runs compile_job.run on the task's baseline.py in its own process group with a
timeout, two at a time. A program that overflows HBM fails to compile with libtpu's RESOURCE_EXHAUSTED;
the table then shows the temporaries libtpu said it needed. "fits" compares the peak (argument + output +
temp where the compiler reports no peak) with the chip table's hbm_bytes, and says whether the task's
FITS_CHIPS (Task.fits_chips; default tasks.FULL_SIZE_CHIPS) claims that chip.

Run: python benchmarks/full_size_memory.py [--chip v5e ...] [--task NAME ...] [--jobs 2] [--timeout 300]
     [--baseline FILE]  (compile FILE's workload on the task's inputs instead, e.g. an older baseline.py)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def compile_one(task_name: str, chip_name: str, baseline: str | None = None) -> dict:
    """In this process: the full-size deviceless compile of one baseline, as a JSON-able row."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from maxkernel.harness.jobs import compile_job
    from maxkernel.tasks import load_task

    task = load_task(task_name)
    kernel = baseline or str(task.baseline_file)
    with tempfile.TemporaryDirectory() as scratch:
        r = compile_job.run({"task": task_name, "kernel": kernel, "chip": chip_name, "size": "full"}, Path(scratch))
    row = {"task": task_name, "chip": chip_name, "ok": r["ok"], "error": r["error"], "compile_s": r["compile_s"]}
    row.update(r["memory"] or {})
    if not r["ok"] and r["error"]:
        # libtpu states what the temporaries alone needed when they overflow HBM.
        m = re.search(r"temporaries \(([\d.]+)([KMGT])\) exceeds available HBM \(([\d.]+)([KMGT])\)", r["error"])
        if m:
            row["oom_temp_bytes"] = int(float(m.group(1)) * _UNITS[m.group(2)])
            row["oom_available_bytes"] = int(float(m.group(3)) * _UNITS[m.group(4)])
    return row


def peak_bytes(row: dict) -> int | None:
    """The program's HBM need: the compiler's peak, else argument + output + temp."""
    if row.get("peak_memory_in_bytes"):
        return row["peak_memory_in_bytes"]
    parts = [row.get(k) for k in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")]
    return sum(parts) if all(p is not None for p in parts) else None


def fits(row: dict) -> bool:
    """Whether the compile succeeded and its peak is within the chip table's HBM."""
    from maxkernel import chips

    peak = peak_bytes(row)
    return bool(row["ok"]) and peak is not None and peak <= chips.get(row["chip"]).hbm_bytes


def run_in_child(task_name: str, chip_name: str, timeout: float, baseline: str | None = None) -> dict:
    """compile_one in a fresh process in its own session, killed as a group past `timeout`."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", task_name, chip_name]
    if baseline:
        cmd += ["--baseline", baseline]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"task": task_name, "chip": chip_name, "ok": False, "error": "timeout", "wall_s": timeout}
    wall = time.perf_counter() - t0
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (err.strip().splitlines() or ["no output"])[-1][:300]
        return {"task": task_name, "chip": chip_name, "ok": False, "error": f"exit {proc.returncode}: {tail}",
                "wall_s": wall}
    row = json.loads(lines[-1])
    row["wall_s"] = wall
    return row


def fits_chips(task_name: str) -> tuple[str, ...]:
    from maxkernel.tasks import load_task

    return load_task(task_name).fits_chips


def _gb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e9:.2f}"


def format_table(rows: list[dict]) -> str:
    from maxkernel import chips

    head = (f"{'task':<57} {'chip':<4} {'arg GB':>7} {'out GB':>7} {'temp GB':>8} {'peak GB':>8} {'HBM GB':>7}"
            "  fits  claimed")
    lines = [head, "-" * len(head)]
    for r in rows:
        hbm = chips.get(r["chip"]).hbm_bytes
        peak = peak_bytes(r)
        claimed = "yes" if r["chip"] in fits_chips(r["task"]) else "no"
        if r["ok"] and peak is not None:
            ok = "yes" if fits(r) else "no"
            temp = _gb(r.get("temp_size_in_bytes"))
        elif "oom_temp_bytes" in r:
            ok, temp = "no", ">" + _gb(r["oom_temp_bytes"])  # temporaries alone, from libtpu's error
        elif r.get("error") == "timeout":
            ok, temp = "timeout", "-"
        else:
            ok, temp = "error", "-"
        lines.append(f"{r['task']:<57} {r['chip']:<4} {_gb(r.get('argument_size_in_bytes')):>7} "
                     f"{_gb(r.get('output_size_in_bytes')):>7} {temp:>8} {_gb(peak if r['ok'] else None):>8} "
                     f"{hbm / 1e9:>7.2f}  {ok:<5} {claimed}")
        if ok == "error":
            lines.append(f"    {r.get('error', '')[:200]}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", nargs=2, metavar=("TASK", "CHIP"), help=argparse.SUPPRESS)
    ap.add_argument("--chip", action="append", help="TPU chip (repeatable; default v5e)")
    ap.add_argument("--task", action="append", help="suite task (repeatable; default all 50)")
    ap.add_argument("--baseline", help="compile this file's workload instead of the task's baseline.py")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(compile_one(*args.one, baseline=args.baseline)))
        return 0

    import jaxbench

    tasks = args.task or jaxbench.task_names()
    pairs = [(t, c) for t in tasks for c in (args.chip or ["v5e"])]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(lambda p: run_in_child(*p, args.timeout, args.baseline), pairs))
    total = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"rows": rows, "wall_s": total}, indent=1))
    else:
        print(format_table(rows))
        bad = [f"{r['task']}@{r['chip']}" for r in rows if r["chip"] in fits_chips(r["task"]) and not fits(r)]
        print(f"\n{len(rows)} compiles in {total:.0f} s ({args.jobs} at a time); "
              f"{len(bad)} claimed but not fitting: {', '.join(bad) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
