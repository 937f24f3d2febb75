"""The kernel tools as commands: evaluate (the trusted verdict), compile, estimate, test, profile, autotune.

Each exits 0 when its answer is the good one (correct, compiles, estimated, passes, profiled, a config found) and 1,
after printing the same result, when it is not (docs/cli.md)."""

from __future__ import annotations

import click

from maxkernel.cli._common import Target, emit, progress, resolve_chip, target_options, use_chip

__all__ = ["COMMANDS", "evaluate", "compile_cmd", "estimate", "test", "profile", "autotune"]


def _spec(target: Target) -> str:
    t = target.task
    return t.name if t.source == "jaxbench" else str(t.path)


@click.command()
@target_options(chip="settings", allow_native=False,
                chip_help="chip the verdict is for (the TPU estimate off a TPU, the trace checks, the hint)")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(min=1),
              help="number of input seeds (drawn fresh for every evaluation)")
@click.option("--replay-seeds", default=None, metavar="S1,S2,...",
              help="replay an earlier verdict: use exactly these seeds (from its correctness.seeds)")
@click.option("--timeout", default=None, type=click.FloatRange(min=0, min_open=True), help="seconds for the candidate run")
def evaluate(target: Target, seeds: int, replay_seeds: str | None, timeout: float | None, as_json: bool) -> None:
    """The trusted verdict on a kernel: sandboxed, multi-seed, integrity-checked. Exit 0 correct, 1 any other
    verdict (incorrect, error, timeout, rejected, unverifiable_on_cpu), 2 usage."""
    from maxkernel.cli._common import UsageError
    from maxkernel.harness.verdict.evaluate import evaluate as run_evaluate

    exact = None
    if replay_seeds is not None:
        try:
            exact = [int(s) for s in replay_seeds.split(",") if s.strip()]
        except ValueError:
            raise UsageError(f"--replay-seeds takes integers separated by commas, not {replay_seeds!r}") from None
        if not exact or any(s < 0 for s in exact):
            raise UsageError("--replay-seeds needs at least one non-negative seed")
    use_chip(target.chip)  # the evaluator reads the settings' chip
    what = f"seeds {exact}" if exact else f"{seeds} fresh seeds"
    progress(f"evaluating {target.kernel} on {target.task.name} ({target.size}, {what}) in a sandbox")
    v = run_evaluate(target.task, target.kernel, size=target.size, seeds=exact or [0] * seeds,
                     exact_seeds=exact is not None, timeout=timeout)
    lines = [f"{v.status.upper()}: {v.reason}"]
    if v.correctness.max_rel_err is not None:
        tol = f" (tolerance {v.correctness.tolerance:.3g})" if v.correctness.tolerance is not None else ""
        lines.append(f"max error {v.correctness.max_rel_err:.3g}{tol} over seeds {v.correctness.seeds}")
    if v.kernel and v.baseline:
        # A task with configs: these are one config's times, and no speedup where a config has none (its geomean).
        speed = f", speedup {v.speedup:.3f}x" if v.speedup is not None else ""
        lines.append(f"kernel {v.kernel.median_ms:.3f} ms ±{v.kernel.iqr_ms:.3f}, baseline {v.baseline.median_ms:.3f}"
                     f" ms ±{v.baseline.iqr_ms:.3f}{speed}")
        lines.append(f"({v.timing_label})")
    if v.integrity:
        share, most = v.integrity.get("pallas_share", 0), v.integrity.get("pallas_share_max")
        # Met writing 5p and 15p: a kernel whose Pallas work sits behind data-dependent branches read "0% of FLOPs
        # inside Pallas" beside CORRECT; the census counts such branches at their lightest, and now says so.
        upto = (f" surely, {most:.0%} where its data-dependent branches run" if most is not None and most > share + 0.005
                else "")
        lines.append(f"{share:.0%} of FLOPs inside Pallas{upto} ({v.integrity.get('pallas_calls', 0)} pallas_call)")
    if v.estimate:
        lines.append(v.estimate.get("summary") or "")
    if v.flags:
        lines.append("flags: " + ", ".join(v.flags))
    for name, c in v.configs.items():
        speed = f", speedup {c['speedup']:.3f}x" if c.get("speedup") else ""
        lines.append(f"  config {name} ({c.get('size')}): {c.get('status')}{speed}"
                     + (f": {c['reason'][:160]}" if c.get("reason") else ""))
    emit(as_json, v.model_dump(), "\n".join(lines), ok=v.status == "correct")


@click.command("compile")
@target_options(size="full", chip="settings", chip_help="chip to compile for")
@click.option("--timeout", default=None, type=click.FloatRange(min=0, min_open=True),
              help="seconds for the compile process (default 90)")
def compile_cmd(target: Target, timeout: float | None, as_json: bool) -> None:
    """Deviceless TPU compile (libtpu) or GPU lowering of a kernel. Exit 0 compiles, 1 does not, 2 usage."""
    from maxkernel.tools.compile_pallas import compile_pallas

    progress(f"compiling {target.kernel} for {target.chip} ({target.size} shapes) in a sandbox")
    r = compile_pallas(_spec(target), str(target.kernel), target.chip, target.size, timeout=timeout)
    said = r.summary + (f"\n{r.error}" if r.error and r.error.strip() not in r.summary else "")  # once, not twice
    emit(as_json, r.model_dump(), said, ok=r.ok)


@click.command()
@target_options(size="full", chip="settings", allow_native=False, tpu_only=True, chip_help="TPU chip to estimate for",
                kernel="optional", task="optional")
@click.option("--program", metavar="FILE.py:FN|MODULE:FN", default=None,
              help="estimate any JAX function instead of a task's program (with --arg; no --task)")
@click.option("--arg", "args", multiple=True, metavar="DTYPE[DIMS]",
              help="with --program: one per positional argument, as in task new (bf16[B=8,4096])")
@click.option("--inputs", metavar="FILE.py:FN|MODULE:FN", default=None,
              help="with --program, instead of --arg: a function returning the program's arguments (a task's "
                   "create_inputs), evaluated abstractly; its dims are named D<size> (--parallel D4)")
@click.option("--arg-gen", "gens", multiple=True, metavar="GEN", help="with --program: input generator per --arg")
@click.option("--static", "statics", multiple=True, metavar="NAME=VALUE",
              help="with --program: keyword argument bound on every call")
@click.option("--parallel", multiple=True, metavar="DIM|ARG.AXIS",
              help="with --program: a dim the program computes independently along (the estimator shrinks it); "
                   "default the one dim leading every argument. With --inputs, ARG.AXIS (0.0: the first argument's "
                   "first axis) names one axis apart from others of its size")
@click.option("--flops", type=click.IntRange(min=1), default=None,
              help="with --program: its FLOPs at full size (default: XLA's cost analysis, which counts a loop body once)")
def estimate(target: Target, program: str | None, args: tuple, inputs: str | None, gens: tuple, statics: tuple,
             parallel: tuple, flops: int | None, as_json: bool) -> None:
    """Estimated TPU time of a kernel and of the task's baseline (without --kernel, the baseline alone; with
    --program and --arg, any JAX function), on a CPU (libtpu's static profile). Exit 0 estimated, 1 not (the kernel
    does not compile, a profile failed), 2 usage.

    \b
    Limits, from the environment (or .env): MAXKERNEL_ESTIMATE_TIMEOUT_S (default 300) is each profiling process's
    time, which a loaded machine may need raised; MAXKERNEL_ESTIMATE_MAX_GFLOP (20) and MAXKERNEL_ESTIMATE_MAX_MB
    (512) are the largest program profiled: bigger ones are shrunk along their parallel dims and extrapolated."""
    from maxkernel.cli._common import UsageError
    from maxkernel.tools.estimate_tpu import estimate_tpu_time

    notes: list[str] = []
    if program is None and target.task is None:
        raise UsageError("name what to estimate: --task T [--kernel K], or --program FILE.py:FN with --arg specs")
    if program is not None:
        if target.task is not None:
            raise UsageError("--program estimates a function of its own: give it without --task and --kernel")
        spec, notes, args = _program_spec(program, list(args), inputs, list(gens), list(statics), list(parallel),
                                          flops)
        what = f"{program} ({', '.join(args)})"
        kernel = None
    else:
        if args or inputs or gens or statics or parallel or flops:
            raise UsageError("--arg, --inputs, --arg-gen, --static, --parallel and --flops go with --program")
        spec, kernel = _spec(target), str(target.kernel) if target.kernel else None
        what = f"{target.kernel} and the {target.task.name} baseline" if kernel else f"the {target.task.name} baseline"
    chip = target.chip or resolve_chip(None, allow_native=False, tpu_only=True)
    progress(f"estimating {what} on {chip} ({target.size} size): profiled compiles on shrunk shapes in sandboxes")
    r = estimate_tpu_time(spec, kernel, chip, target.size)
    r.limits[:0] = notes
    if program is not None and r.stage == "plan":  # the program's dims are named on this command line, not in a file
        r.hint = ("name more dims the program computes independently along with --parallel (repeatable), or raise "
                  "MAXKERNEL_ESTIMATE_MAX_GFLOP / MAXKERNEL_ESTIMATE_MAX_MB")
        r.summary = r.summary.split("\nHint:")[0] + f"\nHint: {r.hint}"
    lines = [r.summary]
    if r.ok:
        lines.append(f"floors: compute {r.floors['compute_ms']:.3g} ms, memory {r.floors['memory_ms']:.3g} ms; "
                     f"static profile {r.static_cycles_ms:.3g} ms ({r.fit.get('how')})")
        u = r.uncertainty or {}
        if u:
            lines.append(f"uncertainty: extrapolated {u['extrapolation'] or 1:.3g}x from the largest profiled size; "
                         f"fit residual {u['fit_max_residual'] or 0:.1%}; 0-cycle fill "
                         f"{u['zero_cycle_fill_share'] or 0:.0%}"
                         + (f" (XLA's cost model {u['cost_model_share']:.0%})" if u.get("cost_model_share") else "")
                         + f" and loop trips {u['loop_trips_share'] or 0:.0%} of "
                         f"its cycles; decided by the {u['decided_by']}")
        lines += [f"limit: {x}" for x in r.limits]
    emit(as_json, r.model_dump(exclude={"kernel", "baseline"}) | {"programs": {
        "kernel": r.kernel.model_dump() if r.kernel else None,
        "baseline": r.baseline.model_dump() if r.baseline else None}}, "\n".join(lines), ok=r.ok)


def _program_spec(program: str, args: list, inputs: str | None, gens: list, statics: list, parallel: list,
                  flops: int | None):
    """The task folder --program and its --arg specs (or --inputs) make (under the cache folder), and what it
    assumed."""
    from maxkernel.cli._common import UsageError
    from maxkernel.settings import get_settings
    from maxkernel.tasknew.program import program_folder
    from maxkernel.tasknew.specs import SpecError

    try:
        folder, notes, args = program_folder(program, args, get_settings().cache_dir / "programs", inputs=inputs, gens=gens,
                                       static=statics, parallel=parallel, flops=flops)
    except SpecError as exc:
        flag = "--inputs" if inputs and repr(inputs) in str(exc) else "--program"
        raise UsageError(str(exc).replace("--from", flag)) from None
    return str(folder), notes, args


@click.command()
@target_options()
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--timeout", default=None, type=click.FloatRange(min=0, min_open=True), help="seconds")
def test(target: Target, seeds: int, timeout: float | None, as_json: bool) -> None:
    """Strict correctness run (TPU interpreter on CPU: races, out-of-bounds, NaN-initialised scratch). Exit 0
    passes, 1 fails, 2 usage."""
    from maxkernel.tools.run_tests import run_tests

    progress(f"testing {target.kernel} on {target.task.name} ({target.size}) under the strict interpreter in a sandbox")
    r = run_tests(_spec(target), str(target.kernel), target.size, seeds=seeds, timeout=timeout)
    emit(as_json, r.model_dump(), r.summary, ok=r.ok)


@click.command()
@target_options(chip="device", allow_native=False, chip_help="chip for the roofline")
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="folder for the trace (default ./profiles/<task>-<time>); nothing is written through a link "
                   "already inside it")
def profile(target: Target, out: str | None, as_json: bool) -> None:
    """Profile kernel and baseline; save an XProf trace and a per-op table. Exit 0 profiled, 1 the profile failed,
    2 usage."""
    from maxkernel.tools.xprof_capture import xprof_capture

    chip = target.chip
    progress(f"profiling {target.kernel} against the {target.task.name} baseline ({target.size}) in a sandbox")
    r = xprof_capture(_spec(target), str(target.kernel), target.size, out_dir=out, chip=chip)
    lines = [r.summary]
    lines += [f"  {o.name:<48} {o.time_ms:>10.3f} ms  x{o.count:g}  {o.share:.0%}" for o in r.ops[:10]]
    if r.trace:
        lines.append(f"trace: {r.trace}")
    emit(as_json, r.model_dump(), "\n".join(lines), ok=r.ok)


@click.command()
@target_options(chip="settings", chip_help="chip for VMEM/compile pruning", tunables=False)
@click.option("--max-configs", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--time-budget", default=600.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="seconds")
def autotune(target: Target, max_configs: int, time_budget: float, as_json: bool) -> None:
    """Search the kernel's TUNABLES: compile-prune, correctness-gate, time. Exit 0 a correct config was found,
    1 none, 2 usage."""
    from maxkernel.tools.autotune import autotune as run_autotune

    if target.chip != "native":
        use_chip(target.chip)  # the correctness gate's evaluations are for the same chip
    progress(f"autotuning {target.kernel} ({target.chip} pruning, timing at {target.size}); "
             "this runs many sandboxed jobs")
    r = run_autotune(_spec(target), str(target.kernel), chip=target.chip, size=target.size, max_configs=max_configs,
                     time_budget_s=time_budget)
    def figure(t) -> str:
        if t.estimated_ms is not None:
            return f"{t.estimated_ms:.3f} ms estimated ({t.bound}-bound)"
        return "" if t.median_ms is None else f"{t.median_ms:.3f} ms"

    lines = [r.summary] + [f"  {t.outcome:<9} {t.config}  {figure(t)}" for t in r.tried]
    emit(as_json, r.model_dump(), "\n".join(lines), ok=r.ok)


COMMANDS = (evaluate, compile_cmd, estimate, test, profile, autotune)
