"""autotune: search a kernel's declared tunables: compile-prune, correctness-gate, time, keep the best."""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import time
from pathlib import Path

from pydantic import BaseModel, Field

from maxkernel import pysource
from maxkernel.pysource import declared_tunables
from maxkernel.harness.verdict.evaluate import shared_evaluator
from maxkernel.settings import get_settings
from maxkernel.tools.compile_pallas import compile_many

__all__ = ["Trial", "TuneResult", "autotune", "declared_tunables", "MAX_SPACE"]

MAX_SPACE = 256  # configurations compiled at most; pruning by compile is cheap, running is not


class Trial(BaseModel):
    config: dict
    outcome: str = Field(description="best, timed, estimated, pruned (compile failed), failed (error/timeout), "
                                     "incorrect, rejected")
    median_ms: float | None = None
    iqr_ms: float | None = None
    estimated_ms: float | None = Field(None, description="Off a TPU: the estimated TPU time at full size.")
    bound: str | None = None
    reason: str = ""
    cached: bool = False


class TuneResult(BaseModel):
    ok: bool
    summary: str
    best: dict | None = Field(None, description="{config, median_ms, iqr_ms, speedup_vs_default}")
    default: dict = Field(default_factory=dict)
    tried: list[Trial] = Field(default_factory=list)
    pruned: int = 0
    failed: int = 0
    incorrect: int = 0
    timing_label: str = ""


def with_defaults(source: str, config: dict) -> str:
    """`source` with workload()'s keyword-only defaults set to `config`'s values (only those keywords' default
    expressions change; everything else in the file stays byte for byte). A keyword workload() does not have
    raises ValueError."""
    tree = pysource.parse(source)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "workload"), None)
    if fn is None:
        raise ValueError("the kernel defines no workload()")
    where = {a.arg: d for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None}
    missing = sorted(set(config) - set(where))
    if missing:
        raise ValueError(f"workload() has no keyword default for {', '.join(missing)}")
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()))
    data = source.encode()
    edits = sorted(((offsets[where[k].lineno - 1] + where[k].col_offset,
                     offsets[where[k].end_lineno - 1] + where[k].end_col_offset, repr(v)) for k, v in config.items()),
                   reverse=True)
    for start, end, text in edits:
        data = data[:start] + text.encode() + data[end:]
    return data.decode()


def _order(space: dict[str, tuple], defaults: dict) -> list[dict]:
    """The default first, then larger blocks first (fewer grid steps; VMEM overflow is pruned cheaply)."""
    names = sorted(space)
    configs = [dict(zip(names, values)) for values in itertools.product(*(space[n] for n in names))]

    def weight(cfg):
        w = 1
        for v in cfg.values():
            w *= v if isinstance(v, (int, float)) and v > 0 else 1
        return -w

    first = {n: defaults.get(n, space[n][0]) for n in names}
    rest = sorted((c for c in configs if c != first), key=weight)
    return [first] + rest


class _Cache:
    """Per (kernel source, task, size, chip, seeds) results, so a re-run does not redo finished trials."""

    def __init__(self, key: str):
        self.path = get_settings().cache_dir / "autotune" / f"{key}.json"
        self.data = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def get(self, cfg: dict) -> dict | None:
        return self.data.get(json.dumps(cfg, sort_keys=True))

    def put(self, cfg: dict, row: dict) -> None:
        self.data[json.dumps(cfg, sort_keys=True)] = row
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{time.monotonic_ns()}.tmp")
        tmp.write_text(json.dumps(self.data))
        tmp.replace(self.path)


def autotune(task: str, kernel: str, chip: str = "v5e", size: str = "smoke", max_configs: int = 16,
             time_budget_s: float = 600.0) -> TuneResult:
    """Searches a kernel's tunable parameters (block sizes etc.) for the fastest correct configuration.

    The kernel declares its search space as a module-level TUNABLES mapping (keyword -> candidate values)
    and takes them as keyword-only arguments of workload(). Every configuration is first compiled for the
    chip at full size (those that overflow VMEM or break layout rules are pruned without running), then
    each survivor must pass the harness's correctness check before it is timed. An incorrect configuration
    is never returned. Results are cached per kernel source, so a repeated call is cheap.

    Args:
        task: Suite task name or task folder.
        kernel: Path of the kernel file.
        chip: Compile target for pruning: v4, v5e, v5p, v6e (default v5e).
        size: Size at which configurations are checked and timed ("smoke" on a CPU).
        max_configs: At most this many configurations that compile are run (the default first).
        time_budget_s: Stop starting new trials after this many seconds.

    Returns:
        best config with its time and speedup over the default, and the table of every trial.
    """
    source = Path(kernel).read_text()
    space, defaults = declared_tunables(source)
    if not space:
        return TuneResult(ok=False, summary="the kernel declares no TUNABLES mapping: nothing to search "
                                            "(add e.g. TUNABLES = {'block_m': (128, 256)} and keyword-only "
                                            "parameters of workload())")
    configs = _order(space, defaults)[:MAX_SPACE]
    settings = get_settings()
    seeds = list(range(settings.eval_seeds))
    by_estimate = settings.estimate and not _on_accelerator()
    key = hashlib.sha256(f"{source}|{task}|{size}|{chip}|{seeds}|{'estimate' if by_estimate else 'time'}"
                         .encode()).hexdigest()[:24]
    cache = _Cache(key)
    deadline = time.monotonic() + time_budget_s

    todo = [c for c in configs if cache.get(c) is None]
    compiled = {json.dumps(r.config, sort_keys=True): r for r in compile_many(task, kernel, [chip], todo)} if todo else {}
    if by_estimate:
        return _by_estimate(task, kernel, chip, size, configs, compiled, cache, seeds, max_configs, deadline)
    trials, label, runs = [], "", 0
    ev = shared_evaluator()
    for cfg in configs:
        row = cache.get(cfg)
        if row is not None:
            trials.append(Trial(**row, cached=True))
            runs += row["outcome"] != "pruned"
            continue
        comp = compiled[json.dumps(cfg, sort_keys=True)]
        if comp.ok and (runs >= max_configs or time.monotonic() > deadline):
            continue  # out of run budget: compiled configurations beyond it stay untried
        if comp.stage == "sandbox":  # the compile process died or timed out: not the config's fault, not cached
            trials.append(Trial(config=cfg, outcome="failed", reason=comp.summary))
            continue
        if not comp.ok:
            row = {"config": cfg, "outcome": "pruned", "reason": comp.summary}
        else:
            runs += 1
            v = ev.evaluate(task, kernel, size=size, seeds=seeds, tunables=cfg, reps=10)
            label = v.timing_label or label
            if v.status == "correct" and v.kernel is not None:
                row = {"config": cfg, "outcome": "timed", "median_ms": v.kernel.median_ms, "iqr_ms": v.kernel.iqr_ms,
                       "reason": v.reason}
            else:
                outcome = {"incorrect": "incorrect", "rejected": "rejected"}.get(v.status, "failed")
                row = {"config": cfg, "outcome": outcome, "reason": v.reason[:500]}
        cache.put(cfg, row)
        trials.append(Trial(**row))

    timed = [t for t in trials if t.outcome == "timed"]
    counts = {k: sum(t.outcome == k for t in trials) for k in ("pruned", "failed", "incorrect", "rejected")}
    default_cfg = configs[0]
    default_row = next((t for t in trials if t.config == default_cfg), None)
    if not timed:
        return TuneResult(ok=False, summary=f"no configuration passed: {counts}", tried=trials,
                          pruned=counts["pruned"], failed=counts["failed"] + counts["rejected"],
                          incorrect=counts["incorrect"], default={"config": default_cfg}, timing_label=label)
    best = min(timed, key=lambda t: t.median_ms)
    best.outcome = "best"
    speedup = (default_row.median_ms / best.median_ms if default_row is not None and default_row.median_ms
               and default_row.outcome in ("timed", "best") else None)
    where = "CPU interpreter time (ranks configurations for this machine only)" if "CPU" in label else label
    summary = (f"best {best.config}: {best.median_ms:.3f} ms"
               + (f", {speedup:.2f}x the default {default_cfg}" if speedup else "")
               + f"; {len(trials)} tried, {counts['pruned']} pruned by the {chip} compiler, "
               f"{counts['incorrect']} incorrect, {counts['failed'] + counts['rejected']} failed ({where}).")
    return TuneResult(ok=True, summary=summary,
                      best={"config": best.config, "median_ms": best.median_ms, "iqr_ms": best.iqr_ms,
                            "speedup_vs_default": speedup},
                      default={"config": default_cfg, "median_ms": default_row.median_ms if default_row else None},
                      tried=trials, pruned=counts["pruned"], failed=counts["failed"] + counts["rejected"],
                      incorrect=counts["incorrect"], timing_label=label)


def _on_accelerator() -> bool:
    from maxkernel.chips import accelerator_nodes

    if not accelerator_nodes():  # JAX is not asked: on a CPU machine libtpu's runtime never starts here
        return False
    import jax

    return jax.default_backend() != "cpu"


def _priced_is_not_checked(verdict, est, size: str) -> str | None:
    """Why an estimate at `size` (a cache hit by now) does not price the program the verdict checked, or None."""
    from maxkernel.harness.verdict.integrity import checked_prints, priced_differs

    if not est.ok:
        return "the priced program cannot be tied to the checked one (it has no estimate now)"
    why = priced_differs(checked_prints(verdict.integrity, size), (est.fit or {}).get("fingerprints") or [])
    return f"the program priced at full size is not the one checked ({why})" if why else None


def _by_estimate(task, kernel, chip, size, configs, compiled, cache, seeds, max_configs, deadline) -> TuneResult:
    """Off a TPU: estimate every configuration that compiled (TPU time at full size, libtpu's static profile), then
    correctness-gate them fastest-estimate first; the first correct one is the best. Interpreter time ranks nothing."""
    from maxkernel import chips as chips_mod
    from maxkernel.harness.estimate.estimator import estimate_program
    from maxkernel.tasks import load_task

    spec, target = load_task(task), chips_mod.get(chip)
    full = "full" if "full" in spec.sizes else size
    trials: dict[str, Trial] = {}
    for cfg in configs:
        k = json.dumps(cfg, sort_keys=True)
        row = cache.get(cfg)
        if row is not None:
            trials[k] = Trial(**row, cached=True)
            continue
        comp = compiled[k]
        if comp.stage == "sandbox":  # the compile process died or timed out: not the config's fault, not cached
            trials[k] = Trial(config=cfg, outcome="failed", reason=comp.summary)
            continue
        if not comp.ok:
            row = {"config": cfg, "outcome": "pruned", "reason": comp.summary}
        elif time.monotonic() > deadline:
            continue  # out of time: compiled configurations beyond it stay unestimated
        else:
            e = estimate_program(spec, kernel, target, full, cfg)
            row = ({"config": cfg, "outcome": "estimated", "estimated_ms": e.estimated_ms, "bound": e.bound,
                    "reason": f"{e.bound}-bound, {(e.fraction_of_roofline or 0):.0%} of roofline (estimated)"}
                   if e.ok else {"config": cfg, "outcome": "failed", "reason": f"could not estimate: {e.error}"[:500]})
        cache.put(cfg, row)
        trials[k] = Trial(**row)
    ranked = sorted((t for t in trials.values() if t.estimated_ms is not None), key=lambda t: t.estimated_ms)
    ev = shared_evaluator()
    best, gated = None, 0
    for t in ranked:
        if gated >= max_configs:
            break
        if t.outcome in ("incorrect", "rejected"):
            continue
        if t.outcome == "best":  # a cached run's winner: still correct for this source and seeds
            best = t
            break
        gated += 1
        v = ev.evaluate(task, kernel, size=size, seeds=seeds, tunables=t.config, reps=0, estimate=False)
        changed = _priced_is_not_checked(v, estimate_program(spec, kernel, target, full, t.config), full) \
            if v.status == "correct" else None
        if changed:  # the estimate that ranked it prices another program than the one just checked
            t.outcome, t.reason = "rejected", f"not ranked: {changed}"[:500]
        elif v.status == "correct":
            t.outcome, t.reason = "best", f"{t.reason}; {v.reason}"[:500]
            best = t
        else:
            t.outcome = {"incorrect": "incorrect", "rejected": "rejected"}.get(v.status, "failed")
            t.reason = f"{v.status}: {v.reason}"[:500]
        cache.put(t.config, t.model_dump(exclude={"cached"}))
        if best is not None:
            break
    tried = list(trials.values())
    counts = {k: sum(t.outcome == k for t in tried) for k in ("pruned", "failed", "incorrect", "rejected")}
    label = f"estimated TPU time on {chip} at {full} size (libtpu static profile + roofline), not measured"
    default = trials.get(json.dumps(configs[0], sort_keys=True))
    if best is None:
        return TuneResult(ok=False, summary=f"no configuration passed: {counts} ({label})", tried=tried,
                          pruned=counts["pruned"], failed=counts["failed"] + counts["rejected"],
                          incorrect=counts["incorrect"], default={"config": configs[0]}, timing_label=label)
    speedup = default.estimated_ms / best.estimated_ms if default and default.estimated_ms else None
    summary = (f"best {best.config}: {best.estimated_ms:.3f} ms estimated on {chip}"
               + (f", {speedup:.2f}x the default {configs[0]}" if speedup else "")
               + f"; {len(tried)} tried, {counts['pruned']} pruned by the {chip} compiler, {len(ranked)} estimated, "
               f"{counts['incorrect']} incorrect ({label}; correctness checked at {size} size).")
    return TuneResult(ok=True, summary=summary,
                      best={"config": best.config, "estimated_ms": best.estimated_ms, "median_ms": None,
                            "iqr_ms": None, "speedup_vs_default": speedup},
                      default={"config": configs[0], "estimated_ms": default.estimated_ms if default else None},
                      tried=tried, pruned=counts["pruned"], failed=counts["failed"] + counts["rejected"],
                      incorrect=counts["incorrect"], timing_label=label)
