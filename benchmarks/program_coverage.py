"""`estimate --program` on the suites' own baselines: workload and create_inputs, no task folder.

    python3 benchmarks/program_coverage.py [--suite jaxbench|realworld|all] [--task T ...] [--chip v5e --chip v6e]
                                           [--out benchmarks/results/program_coverage]

For each task, runs `maxkernel estimate --program baseline.py:workload --inputs baseline.py:create_inputs` with
--parallel naming the axes the task's PARALLEL_DIMS reach (ARG.AXIS: those whose size changes when only those dims
are doubled, both evaluated abstractly; by their sizes, D<size>, where that cannot be told), and with --compare-task beside
`estimate --task` (the same baseline through its task folder), and records both estimates or the named reason there is none. Resumable:
OUT.json keeps the rows made; OUT.md is the table. Every figure is an estimate, not a measured TPU time. A row made
under a raised memory guard (MAXKERNEL_ESTIMATE_MEMORY_MB, e.g. a 24 GB machine running one profile) says so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from maxkernel.settings import Settings, get_settings  # noqa: E402

DEFAULT_MEMORY_MB = Settings.model_fields["estimate_memory_mb"].default


# Axes named by hand beside the task's independent dims, as a user of `estimate --program` would, where the batch alone
# cannot be profiled: 28k's transposed conv does not compile at one image and runs the profiler past its memory guard at
# four (even at 20 GB), so its output depth (x's axis 2) is shrunk too. It did not help: at depth 2 the profiler passed
# 16 GB at two images as well (session 35). 22k's height, tried the same way, was priced under its FLOP floor (0.555 ms
# of static cycles against 1.53 at peak): that shrink misleads, so it is not named here.
EXTRA_AXES = {"28k_ConvTranspose3d_LayerNorm_GELU_Scaling": ["0.2"]}


def _tasks(suite: str) -> list[Path]:
    out = []
    if suite in ("jaxbench", "all"):
        out += sorted(p for p in (ROOT / "jaxbench").iterdir() if (p / "baseline.py").is_file())
    if suite in ("realworld", "all"):
        out += sorted(p for p in (ROOT / "jaxbench" / "realworld").iterdir() if (p / "baseline.py").is_file())
    return out


def _parallel(folder: Path) -> list[str]:
    """The task's independent dims as the --inputs names them (D<size>)."""
    from maxkernel.harness.estimate.estimator import DEFAULT_PARALLEL_DIMS
    from maxkernel.tasks import load_task

    task = load_task(folder)
    names = getattr(task.module, "PARALLEL_DIMS", None) or [d for d in DEFAULT_PARALLEL_DIMS if d in task.config]
    return sorted({f"D{task.config[d]}" for d in names if isinstance(task.config.get(d), int) and task.config[d] > 1})


def _axes(folder: Path) -> list[str]:
    """The task's independent dims as --parallel ARG.AXIS addresses: the axes of create_inputs' arrays whose size
    changes when only those dims are doubled (both evaluated abstractly); [] where that cannot be told."""
    import jax

    from maxkernel.harness.estimate.estimator import DEFAULT_PARALLEL_DIMS
    from maxkernel.tasks import load_task

    task = load_task(folder)
    mod = task.module
    names = getattr(mod, "PARALLEL_DIMS", None) or [d for d in DEFAULT_PARALLEL_DIMS if d in task.config]
    probe = {d: 2 * task.config[d] for d in names if isinstance(task.config.get(d), int) and task.config[d] > 1}
    sizes = getattr(mod, "SIZES", None)
    if not probe or not isinstance(sizes, dict):
        return []
    sizes["_probe"] = probe
    try:
        full = jax.tree.leaves(jax.eval_shape(lambda: mod.create_inputs(size="full")))
        doubled = jax.tree.leaves(jax.eval_shape(lambda: mod.create_inputs(size="_probe")))
    except Exception:  # noqa: BLE001  (a task whose inputs are not made by dims(): by size names)
        return []
    finally:
        sizes.pop("_probe", None)
    if len(full) != len(doubled):
        return []
    return [f"{i}.{a}" for i, (f, d) in enumerate(zip(full, doubled)) if f.shape != d.shape and len(f.shape) ==
            len(d.shape) for a, (x, y) in enumerate(zip(f.shape, d.shape)) if x != y]


def _collisions(folder: Path, parallel: list[str]) -> list[str]:
    """Task dims that are not independent but share a size (so a D<size> name) with one that is: --inputs cannot
    tell them apart, and shrinking the name shrinks both (8p_GEMM's K is 8192, like its M)."""
    from maxkernel.tasks import load_task

    task = load_task(folder)
    named = set(getattr(task.module, "PARALLEL_DIMS", None) or ())
    return sorted(d for d, v in task.config.items() if isinstance(v, int) and not isinstance(v, bool)
                  and d not in named and f"D{v}" in parallel)


def _estimate(args: list[str]) -> tuple[dict, float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "maxkernel.cli", "estimate", *args, "--json"], capture_output=True,
                       text=True, cwd=ROOT, timeout=1800)
    wall = time.monotonic() - t0
    if r.stdout.strip().startswith("{"):
        return json.loads(r.stdout), wall
    return {"ok": False, "error": (r.stderr.strip().splitlines() or ["no output"])[-1][:300], "stage": "usage"}, wall


def row(folder: Path, chip: str, compare: bool) -> dict:
    base = str(folder / "baseline.py")
    par = (_axes(folder) or _parallel(folder)) + EXTRA_AXES.get(folder.name, [])
    prog, wall = _estimate(["--program", f"{base}:workload", "--inputs", f"{base}:create_inputs", "--chip", chip,
                            *[a for d in par for a in ("--parallel", d)]])
    task, _ = _estimate(["--task", str(folder), "--chip", chip]) if compare else ({}, 0.0)
    collides = [] if par and "." in par[0] else _collisions(folder, par)
    return {"task": folder.name, "chip": chip, "parallel": par, "collides": collides,
            "ok": bool(prog.get("ok")),
            "program_ms": prog.get("estimated_ms"), "task_ms": task.get("estimated_ms"),
            "under_priced": prog.get("under_priced"), "stage": prog.get("stage"),
            "error": None if prog.get("ok") else (prog.get("error") or prog.get("summary")), "wall_s": round(wall, 1),
            # The profiler's address-space guard the row ran under (MAXKERNEL_ESTIMATE_MEMORY_MB), said where raised.
            "memory_mb": get_settings().estimate_memory_mb}


def markdown(rows: list[dict], commit: str = "") -> str:
    ok = [r for r in rows if r["ok"]]
    real = {f.name for f in _tasks("realworld")}
    lines = ["# `estimate --program` on the suites' own baselines (TPU estimates, not measured)", "",
             f"{len(ok)} of {len(rows)} (task, chip) pairs estimated, from each task's `workload` and `create_inputs` "
             f"with no task folder (`benchmarks/program_coverage.py`{', at ' + commit if commit else ''}).", "",
             "| suite | chip | estimated | under-priced | not estimated | not run yet |", "|---|---|---|---|---|---|"]
    for suite, names in (("jaxbench", {f.name for f in _tasks("jaxbench")}), ("realworld", real)):
        for chip in ("v5e", "v6e"):
            mine = [r for r in rows if r["task"] in names and r["chip"] == chip]
            lines.append(f"| {suite} ({len(names)}) | {chip} | {sum(r['ok'] for r in mine)} | "
                         f"{sum(bool(r['ok'] and r['under_priced']) for r in mine)} | "
                         f"{sum(not r['ok'] for r in mine)} | {len(names) - len(mine)} |")
    lines += ["", "| task | chip | --parallel | --program ms | --task ms | note |", "|---|---|---|---|---|---|"]
    for r in rows:
        note = (("under-priced: " + str(r["under_priced"]).split(". Likely cause: ")[-1][:160]
                 if r["under_priced"] else "") if r["ok"]
                else f"{r['stage']}: {str(r['error'])[:150]}").replace("|", "/").replace("\n", " ")
        if r.get("memory_mb", DEFAULT_MEMORY_MB) != DEFAULT_MEMORY_MB:
            note = f"(memory guard {r['memory_mb']} MB) {note}".strip()
        if r.get("collides"):
            note += f" (shrinks {', '.join(r['collides'])} too: same size as an independent dim)"
        ms = [f"{v:.3g}" if isinstance(v, (int, float)) else "—" for v in (r["program_ms"], r["task_ms"])]
        lines.append(f"| {r['task']} | {r['chip']} | {' '.join(r['parallel']) or '—'} | {ms[0]} | {ms[1]} | {note} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="all", choices=("jaxbench", "realworld", "all"))
    ap.add_argument("--task", action="append")
    ap.add_argument("--chip", action="append")
    ap.add_argument("--compare-task", action="store_true",
                    help="also estimate the same baseline through its task folder (doubles the run time)")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="only merge these runs' rows into OUT and write its table")
    ap.add_argument("--commit", default="", help="the commit the rows were made at, said in the table")
    ap.add_argument("--retry-failed", action="store_true", help="run again the rows recorded as not estimated")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "program_coverage"))
    args = ap.parse_args()
    out = Path(args.out)
    done = {}
    if out.with_suffix(".json").is_file():
        done = {(r["task"], r["chip"]): r for r in json.loads(out.with_suffix(".json").read_text())}
    if args.merge:
        for part in args.merge:
            done.update({(r["task"], r["chip"]): r for r in json.loads(Path(part).read_text())})
        rows = [done[k] for k in sorted(done)]
        out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
        out.with_suffix(".md").write_text(markdown(rows, args.commit))
        return
    folders = _tasks(args.suite)
    if args.task:  # in the order given
        by_name = {f.name: f for f in folders}
        folders = [by_name[t] for t in args.task if t in by_name]
    for folder in folders:
        for chip in args.chip or ["v5e", "v6e"]:
            if (folder.name, chip) in done and (done[(folder.name, chip)]["ok"] or not args.retry_failed):
                continue
            r = row(folder, chip, args.compare_task)
            done[(r["task"], r["chip"])] = r
            print(json.dumps(r)[:400], flush=True)
            rows = [done[k] for k in sorted(done)]
            out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
            out.with_suffix(".md").write_text(markdown(rows))


if __name__ == "__main__":
    main()
