"""The checks a new task must pass before it is written: it traces at full size, XLA prices it, its smoke size runs
in seconds with finite outputs, its tolerance is calibrated, and no output can be matched by zeros, a constant or
another seed's output."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from maxkernel.harness.verdict import numerics
from maxkernel.tasks import DEFAULT_TOLERANCE

__all__ = ["Check", "Refused", "trace_full", "costs", "time_smoke", "calibrate", "degenerate_leaves", "suite_checks",
           "SMOKE_SECONDS", "MAX_TOLERANCE"]

# A smoke run (after its compile) must take at most this on a CPU: the harness runs it for several seeds, under
# the interpreter for kernels, many times per agent iteration.
SMOKE_SECONDS = 2.0
# A function whose own low-precision output is this far from its f32 run cannot tell a right kernel from a wrong one.
MAX_TOLERANCE = 0.25
# The same bound for a shipped task, checked while the test suite shares the CPU (timings there run ~2-3x slower).
SUITE_SMOKE_SECONDS = 5.0
_CALIBRATION_SEEDS = (1, 2, 3)  # one of each input distribution


class Refused(ValueError):
    """The function cannot become a task; the message says why and what would fix it."""


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    data: dict = field(default_factory=dict)


def _leaves(tree) -> list:
    import jax

    return jax.tree_util.tree_leaves(tree)


def trace_full(task, size: str = "full") -> tuple[Check, list]:
    """The function traces at the full shapes (nothing allocated); returns the output leaves' structs."""
    import jax

    structs = jax.eval_shape(lambda: task.create_inputs(size=size, seed=0))
    try:
        outs = _leaves(jax.eval_shape(task.module.workload, *structs))
    except Exception as exc:  # noqa: BLE001  (the user's function can raise anything)
        raise Refused(f"the function does not trace at the given shapes: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:300]}") from None
    if not outs:
        raise Refused("the function returns no arrays")
    shown = ", ".join(f"{o.dtype}{list(o.shape)}" for o in outs)
    return Check("traces at full size", True, f"outputs {shown}"), outs


def costs(task, size: str) -> dict:
    """FLOPs and bytes accessed from XLA's cost analysis of the compiled program (CPU; shapes only)."""
    import jax

    structs = jax.eval_shape(lambda: task.create_inputs(size=size, seed=0))
    try:
        raw = jax.jit(task.module.workload).lower(*structs).compile().cost_analysis()
    except Exception:  # noqa: BLE001  (a backend without cost analysis: the figures stay unknown)
        return {"flops": None, "bytes": None}
    raw = (raw[0] if isinstance(raw, (list, tuple)) else raw) or {}
    flops, nbytes = raw.get("flops"), raw.get("bytes accessed")
    return {"flops": int(flops) if flops and flops > 0 else None, "bytes": int(nbytes) if nbytes and nbytes > 0 else None}


def _run(task, seed: int, size: str = "smoke"):
    import jax

    inputs = task.create_inputs(size=size, seed=seed)
    return inputs, jax.block_until_ready(jax.jit(task.module.workload)(*inputs))


def time_smoke(task, size: str = "smoke") -> Check:
    """The smoke size runs (compile, then the best of three timed runs, inputs included) with finite outputs."""
    t0 = time.perf_counter()
    try:
        _run(task, 0, size)
        compiled = time.perf_counter() - t0
        runs = []
        for _ in range(3):  # the best of three: a busy machine's spikes are not the function's cost
            t0 = time.perf_counter()
            _, out = _run(task, 1, size)
            runs.append(time.perf_counter() - t0)
            if runs[-1] > 3 * SMOKE_SECONDS:
                break
    except Exception as exc:  # noqa: BLE001
        raise Refused(f"the function fails at the smoke size: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:300]}") from None
    run_s = min(runs)
    for i, leaf in enumerate(_leaves(out)):
        a = np.asarray(leaf)
        if a.dtype.kind == "f" or str(a.dtype) == "bfloat16":
            bad = int(np.sum(~np.isfinite(a.astype(np.float64))))
            if bad:
                raise Refused(f"output {i} holds {bad} NaN/Inf values at the smoke size: a reference must be finite "
                              "(check the input generators: e.g. log of a negative input needs --arg-gen uniform:0.1:1)")
    return Check("smoke size runs in seconds", run_s <= SMOKE_SECONDS,
                 f"{run_s:.3f} s a run on this CPU ({compiled:.1f} s with its compile)", {"run_s": run_s})


def _declared(leaf) -> str:
    return str(np.asarray(leaf).dtype)


def calibrate(task, size: str = "smoke") -> tuple[Check, dict]:
    """Per output dtype: the function's own error against its f32-widened run, over three seeds (one per input
    distribution); the bound is 3x that, never below the harness default; integer and boolean outputs exact."""
    worst: dict[str, float] = {}
    for seed in _CALIBRATION_SEEDS:
        inputs, out = _run(task, seed, size)
        refs = numerics.reference_outputs(task.module.workload, inputs)
        for leaf, ref in zip(_leaves(out), refs):
            dt = _declared(leaf)
            err = numerics.rel_error(np.asarray(leaf).astype(np.float64), ref) if _is_float(dt) else 0.0
            worst[dt] = max(worst.get(dt, 0.0), err)
    tolerance = {}
    for dt, err in worst.items():
        if not _is_float(dt):
            tolerance[dt] = 0.0
            continue
        tol = max(DEFAULT_TOLERANCE.get(dt, DEFAULT_TOLERANCE["float32"]), 3 * err)
        if not np.isfinite(tol) or tol > MAX_TOLERANCE:
            raise Refused(f"{dt} outputs are {err:.3g} (of max|ref|) from the function's own f32 run: too noisy to "
                          "judge a kernel by; give wider inputs (f32) or a better-conditioned function")
        tolerance[dt] = float(f"{tol:.3g}")
    text = ", ".join(f"{dt} {tolerance[dt]:.3g} (own error {worst[dt]:.3g})" for dt in tolerance)
    return Check("tolerance calibrated", True, text, {"own_error": worst}), tolerance


def _is_float(dtype_name: str) -> bool:
    return dtype_name.startswith(("float", "bfloat"))


def degenerate_leaves(task, tolerance: dict, size: str = "smoke") -> Check:
    """Every output must fail the task's own check against zeros, a constant and another seed's output (else a
    kernel returning that would pass); raises Refused naming the output and the stand-in that passed."""
    inputs1, out1 = _run(task, 1, size)
    inputs2, _ = _run(task, 2, size)
    refs1 = numerics.reference_outputs(task.module.workload, inputs1)
    refs2 = numerics.reference_outputs(task.module.workload, inputs2)
    for i, (leaf, ref, other) in enumerate(zip(_leaves(out1), refs1, refs2)):
        dt = _declared(leaf)
        tol = tolerance.get(dt, DEFAULT_TOLERANCE["float32"])
        fro = numerics.FRO_FLOOR.get(dt)
        ref64 = np.asarray(ref).astype(np.float64)
        mean = float(ref64.mean()) if ref64.size else 0.0
        standins = {"zeros": np.zeros(ref64.shape), "a constant (its mean)": np.full(ref64.shape, mean),
                    "ones": np.ones(ref64.shape), "another seed's output": np.asarray(other).astype(np.float64)}
        for what, fake in standins.items():
            if fake.shape != ref64.shape:
                continue
            judged = numerics.compare(i, fake.astype(np.asarray(leaf).dtype), ref, dt, tol, fro)
            if judged.ok:
                raise Refused(f"output {i} ({dt}{list(ref64.shape)}) is degenerate: {what} passes its own check "
                              f"(error {judged.rel_err:.3g} <= tolerance {tol:.3g}), so a kernel returning {what} "
                              f"would be judged correct; make the output depend on the inputs (or drop it)")
    return Check("output non-degenerate", True, "zeros, a constant, ones and another seed's output all fail the "
                                                "tolerance for every output")


def suite_checks(task) -> list[Check]:
    """A shipped task's proof, per config: it traces at full size, its smoke size runs in seconds, its own
    low-precision error sits within the tolerance the harness will apply, and no output is degenerate under that
    tolerance. Raises Refused on the first failure."""
    pairs = task.config_sizes("smoke") or {"": "smoke"}
    checks = []
    for name, smoke in pairs.items():
        full = smoke.replace("smoke", "full", 1)
        where = f" [{name}]" if name else ""
        traced, outs = trace_full(task, full)
        timed = time_smoke(task, smoke)
        if timed.data["run_s"] > SUITE_SMOKE_SECONDS:
            raise Refused(f"{task.name}{where}: a smoke run takes {timed.data['run_s']:.2f} s "
                          f"(at most {SUITE_SMOKE_SECONDS:g} here, where the suite's tests share the CPU)")
        calibrated, _ = calibrate(task, smoke)
        tolerance = {}
        for dt, err in calibrated.data["own_error"].items():
            tolerance[dt] = task.tolerance(dt) if _is_float(dt) else 0.0
            if err > tolerance[dt]:
                raise Refused(f"{task.name}{where}: the baseline's own {dt} error {err:.3g} exceeds the tolerance "
                              f"{tolerance[dt]:.3g} it would be judged by: declare TOLERANCE or compute in f32")
        checks += [Check(c.name + where, c.ok, c.detail, c.data) for c in
                   (traced, timed, calibrated, degenerate_leaves(task, tolerance, smoke))]
    return checks

