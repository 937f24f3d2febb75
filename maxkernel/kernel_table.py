"""`maxkernel bench kernels`: the shipped kernels' table. Each task's `kernel.py` is judged by the harness on fresh
seeds, compiled at full size for each chip, and estimated against the task's XLA baseline on each chip (libtpu's
static profile: estimates, labelled so); one record per task, resumable, summarised as fast_p by estimate."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable

from maxkernel.harness.verdict.configs import geomean  # the verdict's own: None when any value is missing

__all__ = ["TableError", "run_table", "render_table", "summarize_table", "table_tasks", "expert_file", "expert_line", "RECORDS", "DOC",
           "EXPERT"]

RECORDS = "records"  # one <task>.json per finished task under --out
EXPERT = "expert.py"  # beside baseline.py: a task's expert baseline, calling an installed library kernel
DOC = "kernels.json"  # the whole table, rewritten after every task
LABEL = "estimated TPU time at full size (libtpu static profile + roofline floor), not measured"
COMPILE_TIMEOUT_S = 600.0
TRANSIENT = ("timeout", "sandbox")  # estimate stages that say nothing of the kernel: retried on the next run


class TableError(ValueError):
    """Bad input found before any work (an unknown task, a task without kernel.py, a chip that is not a TPU)."""


def table_tasks(suite: str, names: list[str] | None) -> list:
    """The tasks to tabulate: `names` (suite names or task folders), each of which must ship a kernel.py; else
    every task of `suite` that ships one."""
    import jaxbench
    from maxkernel.tasks import TaskError, load_task

    if names:
        out = []
        for name in names:
            try:
                task = load_task(name)
            except TaskError as exc:
                raise TableError(str(exc)) from None
            if not (task.path / "kernel.py").is_file():
                raise TableError(f"task {task.name} ships no kernel.py ({task.path})")
            out.append(task)
        return out
    tasks = [load_task(n) for n in jaxbench.task_names(suite)]
    return [t for t in tasks if (t.path / "kernel.py").is_file()]


def _key(task, kernel: Path, chips: list[str]) -> str:
    """What a record is valid for: the kernel's bytes, the task's files, the estimator's method and the chips."""
    from maxkernel.harness.estimate.estimator import _method_digest
    from maxkernel.harness.estimate.facts import libtpu_version

    parts = [hashlib.sha256(kernel.read_bytes()).hexdigest(), task.digest, _method_digest(), libtpu_version(),
             sorted(chips)]
    expert = expert_file(task)
    if expert:  # an expert added or changed redoes the row (a task without one keeps its old key)
        parts.append(hashlib.sha256(expert.read_bytes()).hexdigest())
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def expert_file(task) -> Path | None:
    """The task's expert baseline (`expert.py`), or None when it has none."""
    path = task.path / EXPERT
    return path if path.is_file() else None


def judged_files(task, kernel: Path) -> dict:
    """What the verdict in a record was given: the kernel's bytes and the task's files, by digest. The suite's test
    of the shipped kernels reads these (tests/harness/test_reference_verdicts.py): a record whose kernel or task
    changed since is no proof of the files on disk."""
    return {"kernel_sha256": hashlib.sha256(kernel.read_bytes()).hexdigest(), "task_digest": task.digest}


def _spec(task) -> str:
    """How the harness and the tools are handed the task: a suite task by name, a folder by its path."""
    return task.name if task.source == "jaxbench" else str(task.path)


def _chip_cell(task, kernel: Path, verdict, chip: str, sizes: list[str], compiled: dict) -> dict:
    """One chip's compile and estimate (per config, geomean speedup), with the tie between what was priced and
    what was checked; a speedup is reported only when every config was estimated and tied."""
    from maxkernel.harness.estimate.estimator import estimate
    from maxkernel.harness.verdict.integrity import checked_prints, priced_differs

    cell: dict = {"chip": chip, "compiled": all(compiled[(chip, s)].ok for s in sizes), "configs": {}}
    first = compiled[(chip, sizes[0])]
    cell.update(vmem_bytes=first.vmem_bytes, vmem_limit_bytes=first.vmem_limit_bytes)
    if not cell["compiled"]:
        bad = next(compiled[(chip, s)] for s in sizes if not compiled[(chip, s)].ok)
        cell.update(error=f"does not compile for {chip}: {bad.summary}", speedup=None, retry=bad.stage == "sandbox")
        return cell
    for size in sizes:
        est = estimate(_spec(task), str(kernel), chip=chip, size=size)
        why = None
        if est.ok:
            why = priced_differs(checked_prints(verdict.integrity, size), (est.fit or {}).get("fingerprints") or [])
        error, stage = (None, None) if est.ok else (est.error or est.summary, est.stage)
        if est.ok and est.speedup_estimate is None:  # the kernel priced, the XLA baseline not: no speedup to show
            base = est.baseline
            error = f"the XLA baseline could not be estimated: {base.error if base else 'no estimate'}"
            stage = base.stage if base else None
        cell["configs"][size] = {
            "ok": est.ok and why is None and error is None, "kernel_ms": est.estimated_ms, "baseline_ms": est.baseline_estimated_ms,
            "speedup": est.speedup_estimate if why is None else None, "bound": est.bound,
            "fraction_of_roofline": est.fraction_of_roofline, "roofline_ms": est.roofline_ms,
            "own_floor_ms": est.own_floor_ms, "data_dependent": est.data_dependent, "limits": est.limits,
            "could_not_estimate": error, "stage": stage,
            "not_the_checked_program": f"the program priced is not the one checked ({why})" if why else None}
    rows = list(cell["configs"].values())
    cell["speedup"] = geomean([r["speedup"] for r in rows]) if all(r["ok"] for r in rows) else None
    for key in ("kernel_ms", "baseline_ms"):
        cell[key] = rows[0][key] if len(rows) == 1 else None
    cell.update(bound=rows[0]["bound"], fraction_of_roofline=rows[0]["fraction_of_roofline"],
                data_dependent=any(r["data_dependent"] for r in rows))
    reasons = [r["could_not_estimate"] or r["not_the_checked_program"] for r in rows if not r["ok"]]
    if reasons:
        cell["error"] = reasons[0]
    # A profile that ran out of time or lost its process says nothing of the kernel: the next run tries again.
    cell["retry"] = any(r["stage"] in TRANSIENT or _ran_out(r["could_not_estimate"]) for r in rows) or any(
        compiled[(chip, s)].stage == "sandbox" for s in sizes)
    return cell


def _expert_cell(task, expert: Path, verdict, chip: str, sizes: list[str], compiled: dict, cell: dict) -> dict:
    """The expert baseline's estimate on one chip, priced as the kernel was (the same estimator, its fingerprints tied
    to the expert's verdict), and the kernel's estimated speedup over it: the geomean over configs of expert time
    over kernel time, None unless every config of both was estimated."""
    from maxkernel.harness.estimate.estimator import estimate
    from maxkernel.harness.verdict.integrity import checked_prints, priced_differs

    out: dict = {"configs": {}, "compiled": all(compiled[(chip, s)].ok for s in sizes)}
    if not out["compiled"]:
        bad = next(compiled[(chip, s)] for s in sizes if not compiled[(chip, s)].ok)
        out.update(error=f"the expert does not compile for {chip}: {bad.summary}", ms=None, speedup_vs_expert=None,
                   retry=bad.stage == "sandbox")
        return out
    for size in sizes:
        est = estimate(_spec(task), str(expert), chip=chip, size=size)
        why = priced_differs(checked_prints(verdict.integrity, size),
                             (est.fit or {}).get("fingerprints") or []) if est.ok else None
        error = None if est.ok else (est.error or est.summary)
        if why:
            error = f"the expert program priced is not the one checked ({why})"
        mine = cell["configs"].get(size) or {}
        ratio = (est.estimated_ms / mine["kernel_ms"] if not error and mine.get("kernel_ms")
                 and not mine.get("not_the_checked_program") else None)  # XLA's baseline need not have priced
        out["configs"][size] = {"ok": error is None, "ms": est.estimated_ms if error is None else None,
                                "bound": est.bound, "fraction_of_roofline": est.fraction_of_roofline,
                                "limits": est.limits, "could_not_estimate": error, "stage": est.stage,
                                "speedup_vs_expert": ratio}
    rows = list(out["configs"].values())
    out["speedup_vs_expert"] = geomean([r["speedup_vs_expert"] for r in rows]) if all(
        r["speedup_vs_expert"] for r in rows) else None
    out["ms"] = rows[0]["ms"] if len(rows) == 1 else None
    reasons = [r["could_not_estimate"] for r in rows if r["could_not_estimate"]]
    if reasons:
        out["error"] = reasons[0]
    out["retry"] = any(r["stage"] in TRANSIENT or _ran_out(r["could_not_estimate"]) for r in rows)
    return out


def _ran_out(error: str | None) -> bool:
    """Whether an estimate's failure was its process running out of time (the XLA baseline's profile included),
    which says nothing of the program."""
    return bool(error) and ("did not finish within" in error or "timed out" in error)


def _row(task, chips: list[str], key: str, progress: Callable[[str], None]) -> dict:
    """Judge, compile and estimate one task's shipped kernel."""
    from maxkernel.harness.verdict.evaluate import evaluate
    from maxkernel.tools.compile_pallas import compile_many

    kernel = task.path / "kernel.py"
    t0 = time.monotonic()
    row = {"task": task.name, "suite": task.suite, "tier": task.tier, "kernel": str(kernel), "key": key,
           "label": LABEL, "degenerate": task.degenerate, **judged_files(task, kernel)}
    progress(f"{task.name}: judging {kernel.name} on fresh seeds (smoke size, sandboxed)")
    v = evaluate(_spec(task), kernel, size="smoke", estimate=False)
    row.update(status=v.status, correct=v.status == "correct", reason=v.reason,
               max_rel_err=v.correctness.max_rel_err, tolerance=v.correctness.tolerance,
               pallas_share=v.integrity.get("pallas_share"), pallas_share_max=v.integrity.get("pallas_share_max"),
               uses_library_kernel=v.uses_library_kernel or "",
               seeds=v.correctness.seeds, chips={})
    expert, ev = expert_file(task), None
    if expert:
        progress(f"{task.name}: judging the expert baseline {expert.name} on fresh seeds (smoke size, sandboxed)")
        ev = evaluate(_spec(task), expert, size="smoke", estimate=False)
        row["expert"] = {"file": str(expert), "sha256": hashlib.sha256(expert.read_bytes()).hexdigest(),
                         "status": ev.status, "correct": ev.status == "correct", "reason": ev.reason,
                         "max_rel_err": ev.correctness.max_rel_err, "library": ev.uses_library_kernel or ""}
    if not row["correct"]:
        row["note"] = f"not compiled or estimated: the harness judged it {v.status}"
        if v.status == "timeout" or (v.status == "error" and v.stage in ("census", "sandbox")):
            # The harness could not decide (a loaded machine, a lost process): the row is tried again next run.
            row["retry"] = True
        row["wall_s"] = round(time.monotonic() - t0, 1)
        return row
    sizes = list(task.config_sizes("full").values()) or ["full"]
    progress(f"{task.name}: compiling at full size for {', '.join(chips)}")
    compiled = {}
    for size in sizes:
        # A table is batch work, often beside other work: a compile gets minutes, not the interactive 90 s.
        for res in compile_many(_spec(task), str(kernel), chips, size=size, timeout=COMPILE_TIMEOUT_S):
            compiled[(res.chip, size)] = res
    priced = expert if ev is not None and ev.status == "correct" else None  # a wrong expert is shown, not priced
    expert_compiled = {}
    if priced:
        progress(f"{task.name}: compiling the expert baseline at full size for {', '.join(chips)}")
        for size in sizes:
            for res in compile_many(_spec(task), str(priced), chips, size=size, timeout=COMPILE_TIMEOUT_S):
                expert_compiled[(res.chip, size)] = res
    for chip in chips:
        progress(f"{task.name}: estimating the kernel and the XLA baseline on {chip} (profiled compiles)")
        cell = row["chips"][chip] = _chip_cell(task, kernel, v, chip, sizes, compiled)
        if priced:
            progress(f"{task.name}: estimating the expert baseline on {chip}")
            cell["expert"] = _expert_cell(task, priced, ev, chip, sizes, expert_compiled, cell)
            cell["expert_ms"] = cell["expert"]["ms"]
            cell["speedup_vs_expert"] = cell["expert"]["speedup_vs_expert"]
            cell["retry"] = cell["retry"] or cell["expert"]["retry"]
    row["wall_s"] = round(time.monotonic() - t0, 1)
    return row


def summarize_table(rows: list[dict], chips: list[str]) -> dict:
    """Per chip (and per suite within it): fast_p by estimate (fast_0 = correct share; fast_p = correct with an
    estimated speedup above p), the geomean estimated speedup over the correct kernels that have one, and the rows
    left out of it (correct but not estimated, with why). A degenerate task's row (its stated work collapses
    algebraically) is listed with why and counted in none of the figures."""
    from maxkernel.evals.stats import FAST_P, fast_key

    degenerate = {r["task"]: r["degenerate"] for r in rows if r.get("degenerate")}
    rows = [r for r in rows if not r.get("degenerate")]

    def figures(part: list[dict], chip: str) -> dict:
        cells = {r["task"]: (r.get("chips") or {}).get(chip) or {} for r in part}
        rough = {r["task"]: why for r in part if r["correct"] and cells[r["task"]].get("speedup")
                 and (why := rough_speedup(cells[r["task"]]))}
        speed = {t: None if t in rough else cell.get("speedup") for t, cell in cells.items()}
        n = len(part)
        out = {"tasks": n, "correct": sum(r["correct"] for r in part)}
        for p in FAST_P:
            hits = sum(r["correct"] and (p == 0 or (speed[r["task"]] or 0) > p) for r in part)
            out[fast_key(p)] = hits / n if n else None
        ranked = [speed[r["task"]] for r in part if r["correct"] and speed[r["task"]]]
        out["geomean_speedup"] = geomean(ranked)
        out["estimated"] = len(ranked)
        out["not_estimated"] = {r["task"]: (r["chips"].get(chip) or {}).get("error") or "not estimated"
                                for r in part if r["correct"] and not speed[r["task"]] and r["task"] not in rough}
        out["rough"] = rough
        out["slower_than_xla"] = sorted(r["task"] for r in part if r["correct"] and speed[r["task"]]
                                        and speed[r["task"]] < 1)
        out["vs_expert"] = versus_expert(part, chip)
        return out

    suites = sorted({r["suite"] for r in rows})
    return {"label": LABEL, "tasks": len(rows), "correct": sum(r["correct"] for r in rows), "degenerate": degenerate,
            "by_chip": {c: {"all": figures(rows, c), **({s: figures([r for r in rows if r["suite"] == s], c)
                                                          for s in suites} if len(suites) > 1 else {})}
                        for c in chips},
            "by_config": {c: by_config(rows, c) for c in chips}}


def by_config(rows: list[dict], chip: str) -> dict:
    """Over the tasks with several configs, fast_p and the geomean per config name (decode apart from prefill: a
    task's geomean hides a config XLA handles worse), each config's own estimated speedup; a task not correct, or a
    config not estimated or too rough to rank, counts as not fast there."""
    from maxkernel.evals.stats import FAST_P, fast_key

    speeds: dict[str, list] = {}
    for r in rows:
        names = _config_names(r["task"])
        if len(names) < 2:
            continue
        cfgs = (((r.get("chips") or {}).get(chip) or {}).get("configs") or {}) if r["correct"] else {}
        for size, name in names.items():
            cfg = cfgs.get(size) or {}
            rough = rough_speedup({"configs": {size: cfg}})
            speeds.setdefault(name, []).append(None if rough or not cfg.get("ok") else cfg.get("speedup"))
    out = {}
    for name, got in speeds.items():
        ranked = [s for s in got if s]
        out[name] = {"tasks": len(got), **{fast_key(p): sum((s or 0) > p if p else s is not None for s in got)
                                           / len(got) for p in FAST_P},
                     "geomean_speedup": geomean(ranked), "estimated": len(ranked)}
    return out


def _config_names(task_name: str) -> dict[str, str]:
    """A suite task's full sizes -> config names ({"full": "prefill", "full@decode": "decode"}); {} for one config
    or a task that no longer loads."""
    from maxkernel.tasks import load_task

    try:
        return {size: name for name, size in load_task(task_name).config_sizes("full").items()}
    except Exception:  # noqa: BLE001  (a record of a task since removed or broken: no config figures)
        return {}


def versus_expert(rows: list[dict], chip: str) -> dict:
    """fast_p and the geomean of the kernels' estimated speedup over the expert baseline, over the rows whose task
    has one (`tasks`); an expert the harness did not judge correct, or one not estimated, gives its row no speedup."""
    from maxkernel.evals.stats import FAST_P, fast_key

    part = [r for r in rows if r.get("expert")]
    cells = {r["task"]: (r.get("chips") or {}).get(chip) or {} for r in part}
    # A kernel priced at its floor or by scaling (11p's grouped matmul, whose work the profile cannot see) ranks
    # nothing against the expert either: left out, listed as rough.
    rough = {t: why for t, cell in cells.items() if vs_expert(cell) and (why := _kernel_rough(cell))}
    vs = {t: None if t in rough else vs_expert(cell) for t, cell in cells.items()}
    out = {"tasks": len(part), "experts_correct": sum(bool(r["expert"].get("correct")) for r in part), "rough": rough}
    for p in FAST_P:
        hits = sum(r["correct"] and (p == 0 or (vs[r["task"]] or 0) > p) for r in part)
        out[fast_key(p)] = hits / len(part) if part else None
    ranked = [vs[r["task"]] for r in part if r["correct"] and vs[r["task"]]]
    out["geomean_speedup"] = geomean(ranked)
    out["estimated"] = len(ranked)
    out["experts_not_correct"] = {r["task"]: f"{r['expert']['status']}: {r['expert'].get('reason') or ''}"[:300]
                                  for r in part if not r["expert"].get("correct")}
    return out


def vs_expert(cell: dict) -> float | None:
    """A chip cell's estimated speedup over the expert: as recorded, or (a record made before the kernel's time was
    compared without XLA's) the expert's time over the kernel's where both were priced and tied to what was checked."""
    if cell.get("speedup_vs_expert"):
        return cell["speedup_vs_expert"]
    configs = list((cell.get("configs") or {}).values())
    if (len(configs) == 1 and cell.get("expert_ms") and configs[0].get("kernel_ms")
            and not configs[0].get("not_the_checked_program")):
        return cell["expert_ms"] / configs[0]["kernel_ms"]
    return None


def expert_line(chip: str, vs: dict) -> str | None:
    """One line of fast_p against the expert baselines for a command's output; None when no task has an expert."""
    from maxkernel.evals.stats import FAST_P, fast_key

    if not vs or not vs.get("tasks"):
        return None
    geo = f"{vs['geomean_speedup']:.3g}x over {vs['estimated']}" if vs["geomean_speedup"] else "—"
    return (f"{chip} vs expert: {vs['tasks']} tasks with an expert ({vs['experts_correct']} judged correct); "
            + " ".join(f"{fast_key(p)} {vs[fast_key(p)]:.0%}" for p in FAST_P) + f"; geomean speedup {geo}")


def _under_priced(cell: dict) -> list[str]:
    """Which of a chip cell's programs the estimator reported under-priced, read from its configs' limits."""
    limits = [x for cfg in (cell.get("configs") or {}).values() for x in cfg.get("limits") or []]
    return [what for what, mark in (("kernel", "under-priced:"), ("XLA baseline", "baseline: under-priced:"))
            if any(x.startswith(mark) for x in limits)]


def _scaled(cell: dict) -> list[str]:
    """Which of a chip cell's programs were priced by scaling their largest profiled size, not by a fitted line."""
    limits = [x for cfg in (cell.get("configs") or {}).values() for x in cfg.get("limits") or []]
    mark = "cycles do not grow linearly with the work"
    return [what for what, prefix in (("kernel", ""), ("XLA baseline", "baseline: "))
            if any(x.startswith(prefix + mark) for x in limits)]


def _kernel_rough(cell: dict) -> str | None:
    """Why a chip cell's kernel time is too rough to rank by, or None."""
    if "kernel" in _scaled(cell):
        return "kernel scaled from its largest profiled size, not fitted"
    if "kernel" in _under_priced(cell):
        return "kernel under-priced: priced at its floor"
    return None


def rough_speedup(cell: dict) -> str | None:
    """Why a chip cell's speedup is too rough to count in fast_p and the geomean, or None when it counts. A program
    priced by scaling its largest profiled size (its cycles did not grow with the work) can be off either way by a
    large factor (9p's XLA baseline on v6e: 127 ms against a 12.6 ms floor, an 8.5x "speedup"), and a kernel priced
    at its floor because its static profile missed work claims the best time it could have. A baseline priced at its
    floor only understates the kernel's speedup, so that one still counts."""
    scaled = _scaled(cell)
    if scaled:
        return f"{' and '.join(scaled)} scaled from its largest profiled size, not fitted"
    return _kernel_rough(cell)


def _markdown(rows: list[dict], summary: dict, chips: list[str]) -> str:
    from maxkernel.evals.stats import FAST_P, fast_key

    def ms(v) -> str:
        return f"{v:.3g}" if v else "—"

    experts = any(r.get("expert") for r in rows)
    per_chip = ("kernel ms", "XLA ms", "speedup") + (("expert ms", "vs expert") if experts else ()) + ("bound",
                                                                                                    "roofline")
    head = ["task", "verdict"] + [f"{c} {w}" for c in chips for w in per_chip] + ["VMEM", "notes"]
    lines = [f"# Shipped kernels: {LABEL}", "",
             "Verdicts are the harness's (sandboxed, fresh seeds, smoke size); times are estimates for each chip at "
             "full size, kernel and XLA baseline priced the same way. Only kernels judged correct are counted.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["task"], r["status"].upper()]
        notes = [r["note"]] if r.get("note") else []
        vmem = ""
        for c in chips:
            cell = (r.get("chips") or {}).get(c) or {}
            frac = cell.get("fraction_of_roofline")
            cells += [ms(cell.get("kernel_ms")), ms(cell.get("baseline_ms")),
                      f"{cell['speedup']:.2f}x" if cell.get("speedup") else "—"]
            if experts:
                ratio = vs_expert(cell)
                cells += [ms(cell.get("expert_ms")), f"{ratio:.2f}x" if ratio else "—"]
            cells += [cell.get("bound") or "—", f"{frac:.0%}" if frac else "—"]
            if cell.get("error"):
                notes.append(f"{c}: {cell['error'][:160]}")
            if (cell.get("expert") or {}).get("error"):
                notes.append(f"{c}: expert not estimated: {cell['expert']['error'][:160]}")
            notes += [f"{c}: {what} under-priced (its static profile misses work: the speedup is rough)"
                      for what in _under_priced(cell)]
            notes += [f"{c}: {what} scaled in proportion from its largest profiled size, not fitted (its cycles did "
                      "not grow with the work: the speedup is rough)" for what in _scaled(cell)]
            if cell.get("vmem_bytes") and not vmem:
                vmem = f"{cell['vmem_bytes'] / 2**20:.1f} MiB"
        ex = r.get("expert")
        if ex:
            notes.append(f"expert: {ex['library'] or 'no library kernel reached'}" + (
                "" if ex.get("correct") else f", judged {ex['status']}: {(ex.get('reason') or '')[:160]}"))
        if r.get("uses_library_kernel"):
            notes.append(f"uses library kernel {r['uses_library_kernel']}")
        if r.get("degenerate"):
            notes.insert(0, f"degenerate task, left out of fast_p: {r['degenerate']}")
        cells += [vmem or "—", "; ".join(notes).replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## fast_p by estimate", "", "| chip | tasks | correct | " + " | ".join(fast_key(p) for p in FAST_P)
              + " | geomean speedup |", "|---|---|---|" + "---|" * (len(FAST_P) + 1)]
    for c in chips:
        for part, f in summary["by_chip"][c].items():
            geo = f"{f['geomean_speedup']:.3g}x over {f['estimated']}" if f["geomean_speedup"] else "—"
            lines.append(f"| {c}{'' if part == 'all' else f' ({part})'} | {f['tasks']} | {f['correct']} | "
                         + " | ".join("—" if f[fast_key(p)] is None else f"{f[fast_key(p)]:.0%}" for p in FAST_P) + f" | {geo} |")
    configs = [(c, name, f) for c in chips for name, f in (summary.get("by_config") or {}).get(c, {}).items()]
    if configs:
        lines += ["", "## fast_p by estimate per config (tasks with several configs)", "",
                  "Each config's own estimated speedup (a task's row above is their geomean): decode apart from "
                  "prefill. fast_0 here is the share of these tasks correct with that config estimated.", "",
                  "| chip | config | tasks | " + " | ".join(fast_key(p) for p in FAST_P) + " | geomean speedup |",
                  "|---|---|---|" + "---|" * (len(FAST_P) + 1)]
        for c, name, f in configs:
            geo = f"{f['geomean_speedup']:.3g}x over {f['estimated']}" if f["geomean_speedup"] else "—"
            lines.append(f"| {c} | {name} | {f['tasks']} | " + " | ".join(f"{f[fast_key(p)]:.0%}" for p in FAST_P)
                         + f" | {geo} |")
    if experts:
        lines += ["", "## fast_p by estimate against the expert baselines (installed library kernels)", "",
                  "Over the tasks that have an `expert.py`; `vs expert` is the expert's estimated time over the "
                  "kernel's, so above 1 the kernel is faster. An expert the harness did not judge correct gives its "
                  "task no speedup.", "", "| chip | tasks with an expert | experts correct | "
                  + " | ".join(fast_key(p) for p in FAST_P) + " | geomean vs expert |",
                  "|---|---|---|" + "---|" * (len(FAST_P) + 1)]
        for c in chips:
            f = summary["by_chip"][c]["all"]["vs_expert"]
            geo = f"{f['geomean_speedup']:.3g}x over {f['estimated']}" if f["geomean_speedup"] else "—"
            lines.append(f"| {c} | {f['tasks']} | {f['experts_correct']} | " + " | ".join(
                "—" if f[fast_key(p)] is None else f"{f[fast_key(p)]:.0%}" for p in FAST_P) + f" | {geo} |")
    rough = [f"{c}: {t} ({why})" for c in chips for t, why in sorted(summary["by_chip"][c]["all"].get("rough", {}).items())]
    rough += [f"{c}: {t} against the expert ({why})" for c in chips
              for t, why in sorted(summary["by_chip"][c]["all"]["vs_expert"].get("rough", {}).items())]
    if rough:
        lines += ["", "Speedups left out of fast_p and the geomean as too rough to rank (the task counts as not "
                  "fast there): " + "; ".join(rough) + "."]
    if summary.get("degenerate"):
        lines += ["", "Left out of fast_p as degenerate (the stated work collapses algebraically): "
                  + ", ".join(sorted(summary["degenerate"])) + "."]
    return "\n".join(lines) + "\n"


def _plot(rows: list[dict], chips: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["task"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(names) + 2), 4))
    width = 0.8 / max(len(chips), 1)
    for i, c in enumerate(chips):
        vals = [((r.get("chips") or {}).get(c) or {}).get("speedup") or 0 for r in rows]
        ax.bar([k + i * width for k in range(len(names))], vals, width, label=c)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="XLA baseline (1x)")
    ax.set_xticks([k + width * (len(chips) - 1) / 2 for k in range(len(names))], names, rotation=60, ha="right",
                  fontsize=7)
    ax.set_ylabel("estimated speedup vs XLA", fontsize=8)
    ax.set_title("Shipped kernels by TPU estimate (libtpu static profile); 0 = not correct or not estimated",
                 fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_table(tasks: list, chips: list[str], out: str | Path, progress: Callable[[str], None] | None = None,
              backend: str = "local", ray_address: str | None = None, concurrency: int = 2) -> dict:
    """Tabulate `tasks` for `chips` into `out` (records/<task>.json, kernels.json, kernels.md, kernels.png). A task
    whose record holds the same key (kernel, task files, estimator, chips) is not redone. backend "ray" makes each
    row as a Ray task (at most `concurrency` at once; a local cluster, or the one at `ray_address`), the records
    written here as they finish: the same records as the local backend's, and `ran_on` says which process made each."""
    from maxkernel import chips as chips_mod

    progress = progress or (lambda _line: None)
    for c in chips:
        if not chips_mod.get(c).is_tpu:
            raise TableError(f"--chip {c}: the table estimates TPU time; give TPU chips (v5e, v6e, ...)")
    if backend not in ("local", "ray"):
        raise TableError(f"unknown backend {backend!r}; choose local or ray")
    folder = Path(out)
    (folder / RECORDS).mkdir(parents=True, exist_ok=True)
    with _table_lock(folder):
        return _run_table(tasks, chips, folder, progress, backend, ray_address, concurrency)


@contextlib.contextmanager
def _table_lock(folder: Path):
    """One table at a time per results folder: two runs on one folder wrote each other's records and tables (a row
    one run judged was replaced by the other's, and its verdict's reason lost). The second is refused, naming the
    first's pid."""
    import fcntl

    path = folder / ".lock"
    with open(path, "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise TableError(f"another `bench kernels` (pid {holder}) is writing to {folder}: wait for it to finish, "
                             "or give another --out") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)


def _run_table(tasks: list, chips: list[str], folder: Path, progress: Callable[[str], None], backend: str,
               ray_address: str | None, concurrency: int) -> dict:
    rows: dict[str, dict] = {}
    todo = []
    for i, task in enumerate(tasks, 1):
        key = _key(task, task.path / "kernel.py", chips)
        record = folder / RECORDS / f"{task.name}.json"
        old = json.loads(record.read_text()) if record.is_file() else None
        retry = old and (old.get("retry") or any(cell.get("retry") for cell in (old.get("chips") or {}).values()))
        if old and old.get("key") == key and not retry:
            progress(f"[{i}/{len(tasks)}] {task.name}: unchanged since its record (kernel, task, estimator): kept")
            rows[task.name] = {**old, "resumed": True}
        else:
            todo.append((i, task, key))

    def keep(i: int, task, row: dict) -> None:
        record = folder / RECORDS / f"{task.name}.json"
        tmp = record.with_suffix(".tmp")
        tmp.write_text(json.dumps(row, indent=1, default=str))
        tmp.replace(record)  # a crash mid-write leaves the old record or none, never half of one
        rows[task.name] = row
        progress(f"[{i}/{len(tasks)}] {task.name}: {row['status'].upper()}"
                 + "".join(f"; {c} {cell['speedup']:.2f}x" if cell.get("speedup") else f"; {c} —"
                           for c, cell in (row.get("chips") or {}).items()))

    if backend == "ray" and todo:
        from maxkernel.search.ray_backend import RayBackendError, run_each

        def done(item, result: dict) -> None:
            for line in result["lines"]:
                progress(f"[{item[0]}/{len(tasks)}] {line}")
            keep(item[0], item[1], result["row"])

        try:
            # A task goes by name or folder (a loaded folder task holds a module only its own process has).
            by_spec = {_spec(task): task for _i, task, _key in todo}
            run_each(_ray_row, [(i, _spec(task), key, chips) for i, task, key in todo], concurrency=concurrency,
                     address=ray_address, on_start=lambda item: progress(f"[{item[0]}/{len(tasks)}] "
                                                                         f"{by_spec[item[1]].name} (as a Ray task)"),
                     on_done=lambda item, result: done((item[0], by_spec[item[1]]), result))
        except RayBackendError as exc:
            raise TableError(str(exc)) from None
    else:
        for i, task, key in todo:
            progress(f"[{i}/{len(tasks)}] {task.name}")
            keep(i, task, _safe_row(task, chips, key, progress, "local"))
    # The folder's table is every task recorded in it: a run over a few tasks updates their rows, and the rows of
    # the others (made earlier, for these chips) stay in the table instead of vanishing from it.
    earlier = [r for r in _folder_rows(folder, chips) if r["task"] not in rows]
    if earlier:
        progress(f"table: {len(rows)} row(s) from this run and {len(earlier)} kept from earlier records in {folder}")
    return _write(folder, sorted([*rows.values(), *earlier], key=lambda r: r["task"]) if earlier
                  else [rows[t.name] for t in tasks], chips)


def _safe_row(task, chips: list[str], key: str, progress, backend: str) -> dict:
    """The row, or on a harness failure an error row that the next run tries again; `ran_on` says who made it."""
    from maxkernel.search.ray_backend import where

    kernel = task.path / "kernel.py"
    try:
        row = _row(task, chips, key, progress)
    except Exception as exc:  # noqa: BLE001 - one task's harness failure costs its row, not the table
        row = {"task": task.name, "suite": task.suite, "tier": task.tier, "kernel": str(kernel), "key": key,
               **judged_files(task, kernel), "label": LABEL, "status": "error", "correct": False, "chips": {},
               "retry": True, "reason": f"{type(exc).__name__}: {exc}"[:1000],
               "note": "not judged: the harness failed on it; the next run tries again"}
    return {**row, "ran_on": where(backend)}


def _ray_row(item: tuple) -> dict:
    """One row made in a Ray worker; its progress lines come back with it."""
    from maxkernel.settings import get_settings

    from maxkernel.tasks import load_task

    _i, spec, key, chips = item
    get_settings.cache_clear()
    task = load_task(spec)
    lines: list[str] = []
    return {"row": _safe_row(task, chips, key, lines.append, "ray"), "lines": lines}


def _write(folder: Path, rows: list[dict], chips: list[str]) -> dict:
    summary = summarize_table(rows, chips)
    doc = {"label": LABEL, "chips": chips, "out": str(folder), "rows": rows, "summary": summary,
           "files": {"json": str(folder / DOC), "markdown": str(folder / "kernels.md"),
                     "plot": str(folder / "kernels.png")}}
    (folder / DOC).write_text(json.dumps(doc, indent=1, default=str))
    (folder / "kernels.md").write_text(_markdown(rows, summary, chips))
    _plot(rows, chips, folder / "kernels.png")
    return doc


def _folder_rows(folder: Path, chips: list[str]) -> list[dict]:
    """The records under `folder` that belong in a table for `chips`: those made for every one of them, and every
    kernel not judged correct (it has no chip cells)."""
    rows = []
    for f in sorted((folder / RECORDS).glob("*.json")):
        try:
            row = json.loads(f.read_text())
        except (OSError, ValueError):
            continue  # a record edited by hand or cut short: its task is redone by the next run, not the table's end
        if isinstance(row, dict) and "task" in row:
            rows.append(row)
    return [r for r in rows if all(c in (r.get("chips") or {}) for c in chips) or not r.get("correct")]


def render_table(out: str | Path) -> dict:
    """`maxkernel report` on a kernel table's folder: the table, fast_p by estimate per chip and the plot, written
    again from its records (every record for the chips the table was made for)."""
    folder = Path(out)
    chips = json.loads((folder / DOC).read_text())["chips"]
    rows = _folder_rows(folder, chips)
    if not rows:
        raise TableError(f"no task records under {folder / RECORDS}")
    return _write(folder, rows, chips)
