"""The equivalence check of a port: the original (or its PyTorch oracle) and the JAX port run in separate
sandboxed jobs on the same drawn inputs, seed by seed and dtype by dtype; the trusted parent compares them with
the harness's tolerances and says where and by how much they differ."""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from maxkernel.harness.verdict.arrays import load_arrays, save_arrays
from maxkernel.harness.sandbox.copyout import CopyOutError, read_bytes
from maxkernel.harness.verdict.numerics import compare, rel_error
from maxkernel.harness.sandbox.pool import WorkerPool
from maxkernel.harness.sandbox.static_check import check_source
from maxkernel.port.spec import PortSpec, draw_check_size, draw_inputs, elements
from maxkernel.tasknew import specs as S
from maxkernel.tasks import DEFAULT_TOLERANCE

__all__ = ["PortReport", "check_port", "describe", "feedback_text", "oracle_label", "param_specs"]

ORIGINAL, PORT = "original.py", "port.py"
CHECK_BOUND = 4.0  # the second size holds at most this many times the smoke size's elements (the CPU oracle's cost)
# A low-precision port may differ from the original by this many times the original's own rounding error (its run
# against the same inputs widened to float32): both round about as much, in directions of their own. Measured: the
# held-in attention port in bfloat16 at S=2048 differs from torch by up to 0.0235 of max|ref| (one element in 2M),
# over the fixed 0.02, while torch's own bfloat16 error there is of the same order.
OWN_FACTOR = 2.0


class PortReport(BaseModel):
    """The harness's answer on one port: equivalent only when every seed and every checked dtype agrees."""

    ok: bool = Field(description="The check ran (False: the oracle or the sandbox failed, see error).")
    equivalent: bool = False
    summary: str = ""
    name: str = ""
    kind: str = ""
    port: str = ""
    seeds: list[int] = Field(default_factory=list)
    dtypes: list[str] = Field(default_factory=list, description="Float dtypes the check ran in.")
    unsupported_dtypes: dict[str, str] = Field(default_factory=dict, description="Dtypes the original itself fails in.")
    size: dict[str, int] = Field(default_factory=dict, description="The dims the check ran at (the smoke size).")
    check_size: dict[str, int] = Field(default_factory=dict, description="The second size, drawn per check and never "
                                       "announced, the first float dtype ran at too ({} when every dim is structure).")
    check_seed: int | None = Field(None, description="The seed of the inputs at the second size.")
    full_checked: bool = Field(False, description="The full size was small enough to be checked as well.")
    oracle: str = Field("", description="What ran as the oracle, and where: the original on CPU (PyTorch, or a "
                        "Triton launcher under Triton's interpreter), the original on an NVIDIA GPU, or a PyTorch oracle.")
    backward: bool = Field(False, description="Gradients checked too: the original's backward vs jax.vjp of the port.")
    params: list[dict] = Field(default_factory=list, description="A module's parameters, passed as trailing inputs.")
    per_seed: list[dict] = Field(default_factory=list)
    mismatch: dict | None = Field(None, description="The first disagreement: seed, dtype, output, worst location.")
    error: str | None = None
    hint: str = ""


def _run(pool: WorkerPool, job: dict, files: dict, timeout: float | None, outputs: int) -> tuple[dict, list]:
    """One sandboxed port job; its result and the out_<i>.npz it wrote (read without following links; None for
    an input at the second size that the original failed on)."""
    res = pool.run({"kind": "port", **job}, files, timeout)
    try:
        result = res.result or {}
        if res.status != "ok" or result.get("status") != "ok":
            why = result.get("error") or res.stderr_tail[-800:] or res.status
            if res.status == "timeout":
                why = f"timed out after {res.wall_s:.0f} s"
            return {"status": "error", "error": str(why), "traceback": str(result.get("traceback", ""))[-1500:],
                    **({"input": result["input"]} if isinstance(result.get("input"), int) else {})}, []
        outs = []
        for i in range(outputs):
            if str(i) in (result.get("failed") or {}):
                outs.append(None)
                continue
            try:
                outs.append(load_arrays(read_bytes(res.scratch, f"out_{i}.npz", 1 << 30)))
            except (CopyOutError, ValueError, OSError) as exc:
                return {"status": "error", "error": f"out_{i}.npz unreadable: {exc}"}, []
        return result, outs
    finally:
        res.cleanup()


def describe(spec: PortSpec, pool: WorkerPool | None = None, timeout: float | None = None) -> dict:
    """The original's kind and (a module's) parameters, from a sandboxed import of it."""
    own = pool is None
    pool = pool or WorkerPool(size=0)
    try:
        src, name = spec.oracle or (spec.source, spec.name)
        job = {"mode": "describe", "file": ORIGINAL, "name": name, "init": spec.init_at(spec.smoke),
               "full_init": spec.init_at(spec.config), "op_kind": "function" if spec.oracle else None}
        result, _ = _run(pool, job, {ORIGINAL: Path(src)}, timeout, 0)
        return result
    finally:
        if own:
            pool.close()


def _name_dim(size: int, smoke: int, spec: PortSpec) -> str | int:
    names = [d for d, v in spec.config.items() if v == size and spec.smoke[d] == smoke]
    return names[0] if len(names) == 1 else size


def param_specs(spec: PortSpec, params: list[dict], dtype: str) -> list[tuple[str, S.ArgSpec]]:
    """Each parameter as an input spec: dims named after the --arg/--dim dims they follow (a fixed size stays a
    number), drawn uniformly over the range its own init gives (a constant init, like RMSNorm's ones, is drawn
    around its value so that a port ignoring the weight is caught)."""
    out = []
    for p in params:
        if len(p["full_shape"]) != len(p["shape"]):
            raise S.SpecError(f"parameter {p['name']} changes rank with size")
        dims = tuple(_name_dim(f, s, spec) for f, s in zip(p["full_shape"], p["shape"]))
        for f, s, d in zip(p["full_shape"], p["shape"], dims):
            if isinstance(d, int) and f != s:
                raise S.SpecError(f"parameter {p['name']} has a dim ({f} at full size, {s} at smoke) that no --arg or "
                                  f"--dim names: declare it, e.g. --dim F={f} and --init ...=F")
        lo, hi = float(p["min"]), float(p["max"])
        if hi - lo < 1e-6:
            lo, hi = lo - 0.5, hi + 0.5
        out.append((p["name"], S.ArgSpec(dtype, dims, f"uniform:{lo:.6g}:{hi:.6g}")))
    return out


def _spec_text(arg: S.ArgSpec, config: dict[str, int]) -> str:
    short = {v: k for k, v in S.DTYPES.items() if len(k) <= 4}
    dims = ",".join(f"{d}={config[d]}" if isinstance(d, str) else str(d) for d in arg.dims)
    return f"{short.get(arg.dtype, arg.dtype)}[{dims}]"


def _float_dtype(spec: PortSpec) -> str:
    return next((a.dtype for a in spec.arg_specs if a.is_float), "float32")


def _normalise(o, c):
    """The oracle's 64-bit outputs (torch's default for indices and sums) judged as jax's 32-bit ones; any other
    dtype difference stays, and compare() names it."""
    if str(o.dtype) in ("int64", "float64") and str(c.dtype) in ("int32", "float32"):
        return o.astype(c.dtype)
    return o


def own_errors(oracle: list | None, widened: list | None) -> list[float] | None:
    """The original's own rounding error per output: its low-precision run against its run on the same inputs
    widened to float32 (None where either is missing or they do not line up)."""
    if not oracle or not widened or len(oracle) != len(widened):
        return None
    out = []
    for o, w in zip(oracle, widened):
        if not str(o.dtype).startswith(("float16", "bfloat16")) or getattr(w, "shape", None) != o.shape:
            out.append(0.0)
            continue
        err = rel_error(o, w)
        out.append(err if err != float("inf") else 0.0)
    return out


def _compare(oracle: list, port: list, n_outputs: int | None = None,
             own: list[float] | None = None) -> tuple[bool, list[dict], str]:
    """Output by output, within the dtype's fixed tolerance, or OWN_FACTOR times the original's own rounding
    error where that is larger: two programs that each round as much as the original may differ by that much."""
    if len(oracle) != len(port):
        n = n_outputs if n_outputs is not None else len(oracle)
        return False, [], f"the port returns {len(port) - (len(oracle) - n)} outputs, the original {n}"
    rows, ok = [], True
    for i, (o, c) in enumerate(zip(oracle, port)):
        o = _normalise(o, c)
        dtype = str(o.dtype)
        tol = 0.0 if not dtype.startswith(("float", "bfloat")) else DEFAULT_TOLERANCE.get(dtype, DEFAULT_TOLERANCE["float32"])
        own_err = own[i] if own and i < len(own) else 0.0
        tol = max(tol, OWN_FACTOR * own_err) if tol else tol
        m = compare(i, c, o, dtype, tol)
        ok = ok and m.ok
        what = {} if n_outputs is None or i < n_outputs else {"gradient_of_input": i - n_outputs}
        what.update({"own_error": own_err} if own_err else {})
        rows.append({"output": i, **what, "ok": m.ok, "rel_err": m.rel_err, "tolerance": m.tolerance, "reason": m.reason,
                     "bad_elements": m.bad_elements, "worst_index": list(m.worst_index), "port": m.worst_out,
                     "original": m.worst_ref, "shape": list(o.shape), "dtype": dtype})
    return ok, rows, ""


def check_port(spec: PortSpec, port_file: str | Path, function: str, *, seeds: int = 3,
               dtypes: list[str] | None = None, backward: bool = False, timeout: float | None = None,
               progress: Callable[[str], None] = lambda msg: None) -> PortReport:
    """Is `function` in `port_file` (pure JAX) the same operator as the original? Never raises for anything
    the port or the original does; a bad spec is a SpecError."""
    port_file = Path(port_file)
    base = {"name": spec.name, "kind": spec.kind, "port": f"{port_file}:{function}", "size": dict(spec.smoke),
            "backward": backward}
    if not port_file.is_file():
        return PortReport(ok=False, summary=f"no port file {port_file}", error=f"no file {port_file}",
                          hint="write the JAX port first", **base)
    refused = check_source(port_file.read_text(errors="replace"), port_file.name)
    if refused:
        return PortReport(ok=True, summary=f"NOT EQUIVALENT: the port was refused before it ran: {refused}",
                          error=refused, hint="a port is pure JAX: jax.numpy/lax, numpy, math, functools; no "
                          "torch, no files, no callbacks", **base)
    drawn = sorted(secrets.SystemRandom().sample(range(1, 1 << 30), seeds))
    cot_seeds = [secrets.randbelow(1 << 30) for _ in drawn]
    pool = WorkerPool(size=0)
    tmp = tempfile.TemporaryDirectory(prefix="mk-port-")
    try:
        progress(f"describing {spec.source.name}:{spec.name} in the sandbox")
        info = describe(spec, pool, timeout)
        if info.get("status") != "ok":
            return PortReport(ok=False, summary=f"the original could not be loaded: {info.get('error')}",
                              error=info.get("error"), hint="check --from, --init and that it runs on CPU", **base)
        kind = info["kind"]
        primary = _float_dtype(spec)
        sweep = [primary] + [d for d in (dtypes or ["float32"]) if d != primary]
        if not any(a.is_float for a in spec.arg_specs):
            sweep = [primary]
        # On an NVIDIA GPU a Triton or CUDA original runs as itself, the oracle a user gave notwithstanding.
        gpu = bool(info.get("cuda")) and spec.kind in ("triton", "cuda")
        src, oname = (spec.source, spec.name) if gpu else (spec.oracle or (spec.source, spec.name))
        report = PortReport(ok=True, seeds=drawn, params=info.get("params", []), **{**base, "kind": kind})
        try:
            pdims = [a for _, a in param_specs(spec, info.get("params", []), primary)]
        except S.SpecError as exc:
            return report.model_copy(update={"ok": False, "error": str(exc), "summary": str(exc)})
        # The second size: drawn here, per check, never announced; the first dtype runs there too, in its jobs.
        extra = []  # (label, dims, seed, cotangent seed)
        check = draw_check_size(spec, pdims, bound=CHECK_BOUND)
        if check:
            report.check_size, report.check_seed = check, secrets.randbelow(1 << 30)
            extra.append(("check size", check, report.check_seed, secrets.randbelow(1 << 30)))
        everything = spec.arg_specs + pdims
        if spec.config not in (spec.smoke, check) and \
                elements(spec.config, everything) <= CHECK_BOUND * elements(spec.smoke, everything):
            report.full_checked = True
            extra.append(("full size", dict(spec.config), secrets.randbelow(1 << 30), secrets.randbelow(1 << 30)))
        for dtype in sweep:
            pspecs = [S.ArgSpec(dtype, a.dims, a.gen) for a in pdims]
            rows = [("smoke size", dict(spec.smoke), seed, cot) for seed, cot in zip(drawn, cot_seeds)]
            rows += extra if dtype == primary else []
            files = {}
            for i, (_, dims, seed, _) in enumerate(rows):
                arrays = draw_inputs(spec.arg_specs, dims, seed, dtype) + draw_inputs(pspecs, dims, seed + 1)
                files[f"inputs_{i}.npz"] = Path(tmp.name) / f"{dtype}_inputs_{i}.npz"
                save_arrays(files[f"inputs_{i}.npz"], arrays)
            common = {"seeds": len(rows), "static": spec.static, "n_params": len(pspecs), "backward": backward,
                      "cot_seeds": [r[3] for r in rows]}
            progress(f"{dtype}: running the original ({'oracle ' if spec.oracle else ''}{kind}) on {len(drawn)} seeds"
                     + (f" and {len(rows) - len(drawn)} more at other sizes" if len(rows) > len(drawn) else ""))
            job = {"mode": "oracle", "file": ORIGINAL, "name": oname, "init": spec.init_at(spec.smoke),
                   "inits": [spec.init_at(r[1]) for r in rows], "extra_from": len(drawn),
                   "dtype": dtype if pspecs else None, "op_kind": "function" if spec.oracle and not gpu else kind,
                   "device": "cuda" if gpu else "cpu", **common}
            res_o, outs_o = _run(pool, job, {ORIGINAL: Path(src), **files}, timeout, len(rows))
            if res_o.get("status") == "ok" and not report.oracle:
                report.oracle = oracle_label(res_o.get("ran") or {}, spec.oracle and not gpu and (Path(src).name, oname))
            if res_o.get("status") != "ok":
                if dtype != primary:
                    report.unsupported_dtypes[dtype] = str(res_o.get("error"))[:300]
                    continue
                return report.model_copy(update={"ok": False, "error": res_o.get("error"), "hint": res_o.get("traceback", "")[-600:],
                                                 "summary": f"the original failed on CPU: {res_o.get('error')}"})
            if res_o.get("failed"):  # the check cannot vouch for a size the original itself does not run at
                i, why = next(iter(res_o["failed"].items()))
                label, dims = rows[int(i)][:2]
                error = f"the original fails at the {label} {_dims(dims)}: {why}"
                return report.model_copy(update={"ok": False, "error": error, "summary": error,
                                                 "hint": "the check also runs the original at a size it draws (each "
                                                         "dim above 128 or shrunk for smoke, from half to twice its "
                                                         "smoke size); make it run there"})
            outs_w = _widened_oracle(pool, job, Path(src), files, timeout, len(rows), dtype, tmp.name, progress)
            progress(f"{dtype}: running the JAX port on the same inputs")
            job = {"mode": "candidate", "file": PORT, "name": function, **common}
            res_c, outs_c = _run(pool, job, {PORT: port_file, **files}, timeout, len(rows))
            report.dtypes.append(dtype)
            if res_c.get("status") != "ok":
                at = rows[res_c["input"]] if isinstance(res_c.get("input"), int) and res_c["input"] < len(rows) else None
                where = {"seed": at[2], "at": at[0], "dims": at[1]} if at else {}
                report.per_seed.append({"dtype": dtype, "ok": False, "error": res_c.get("error"), **where})
                return _finish(report, {"dtype": dtype, "error": res_c.get("error"), **where,
                                        "traceback": res_c.get("traceback", "")[-1200:]})
            for j, ((label, dims, seed, _), o, c) in enumerate(zip(rows, outs_o, outs_c)):
                own = own_errors(o, outs_w[j] if outs_w else None)
                ok, out_rows, why = _compare(o, c, res_o.get("n_outputs") if backward else None, own)
                at = {} if label == "smoke size" else {"at": label, "dims": dims}
                report.per_seed.append({"seed": seed, "dtype": dtype, "ok": ok, **at, "outputs": out_rows,
                                        **({"error": why} if why else {})})
                if not ok and report.mismatch is None:
                    bad = next((r for r in out_rows if not r["ok"]), None)
                    report.mismatch = {"seed": seed, "dtype": dtype, "at": label, "dims": dims,
                                       **(bad or {"reason": why})}
            if report.mismatch is not None:
                break  # the verdict is in: no other dtype can make it equivalent
        return _finish(report, report.mismatch)
    finally:
        pool.close()
        tmp.cleanup()


def _widened_oracle(pool: WorkerPool, job: dict, original: Path, files: dict, timeout, n: int, dtype: str, tmp: str,
                    progress) -> list | None:
    """The original on the same inputs widened to float32, for a float16/bfloat16 check (None otherwise, or when the
    original does not run so): what its own rounding error is measured against."""
    import numpy as np

    if dtype not in ("bfloat16", "float16"):
        return None
    wide = {}
    for name, path in files.items():
        arrays = load_arrays(path.read_bytes())
        widened = [a.astype(np.float32) if str(a.dtype) == dtype else a for a in arrays]
        wide[name] = Path(tmp) / f"wide_{name}"
        save_arrays(wide[name], widened)
    progress(f"{dtype}: running the original on the same inputs widened to float32 (its own rounding error)")
    res, outs = _run(pool, {**job, "dtype": "float32" if job.get("dtype") else None}, {ORIGINAL: original, **wide},
                     timeout, n)
    return outs if res.get("status") == "ok" and not res.get("failed") else None


def _finish(report: PortReport, mismatch: dict | None) -> PortReport:
    if mismatch is None and report.dtypes:
        n = len(report.seeds)
        extra = f"; the original does not run in {', '.join(report.unsupported_dtypes)}" if report.unsupported_dtypes else ""
        grads = ", gradients included" if report.backward else ""
        second = [f"the check size {_dims(report.check_size)}"] if report.check_size else []
        second += ["the full size"] if report.full_checked else []
        also = f", and in {report.dtypes[0]} at {' and '.join(second)}" if second else ""
        return report.model_copy(update={"equivalent": True, "summary": f"EQUIVALENT on {n} seeds in "
                                         f"{', '.join(report.dtypes)} at {_dims(report.size)}{also}{grads}{extra}"})
    mismatch = mismatch or {}
    at = f" at the {mismatch['at']} {_dims(mismatch['dims'])}" if mismatch.get("at") not in (None, "smoke size") else ""
    if mismatch and "error" in mismatch and "output" not in mismatch:
        return report.model_copy(update={"equivalent": False, "mismatch": mismatch, "error": mismatch["error"],
                                         "summary": f"NOT EQUIVALENT: the port failed to run{at} ({mismatch['dtype']}): "
                                                    f"{mismatch['error']}"})
    where = mismatch.get("reason") or ""
    if "gradient_of_input" in mismatch:
        where = f"the gradient of input {mismatch['gradient_of_input']} differs: {where}"
    return report.model_copy(update={"equivalent": False, "mismatch": mismatch,
                                     "summary": f"NOT EQUIVALENT{at} (seed {mismatch['seed']}, {mismatch['dtype']}): "
                                                f"{where}"
                                                + (f"; port {mismatch['port']:.6g} vs original {mismatch['original']:.6g}"
                                                   if "port" in mismatch else "")})


def _dims(d: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in d.items())


def oracle_label(ran: dict, oracle: tuple[str, str] | None | bool) -> str:
    """What ran as the oracle and where, from what the oracle job reports it ran (its device, whether Triton ran
    under its CPU interpreter), never from the source's declared kind."""
    if ran.get("device") == "cuda":
        what = f"the PyTorch oracle {oracle[0]}:{oracle[1]}" if oracle else "the original"
        return f"{what} on an NVIDIA GPU"
    if oracle:
        return f"the PyTorch oracle {oracle[0]}:{oracle[1]} on CPU"
    if ran.get("triton_interpreter"):
        return "the original under Triton's CPU interpreter"
    if not ran:
        return "the original (the oracle job did not say where it ran)"
    return "the original in PyTorch on CPU"


def feedback_text(report: dict) -> str:
    """What a failed check tells the porter for its next round: the summary and where the port differs."""
    m = report.get("mismatch") or {}
    lines = [report.get("summary", "")]
    if m.get("traceback"):
        lines.append("Traceback (end):\n" + str(m["traceback"])[-1500:])
    elif m.get("worst_index") is not None and "output" in m:
        size = f" at {_dims(m['dims'])} ({m.get('at', 'smoke size')})" if m.get("dims") else ""
        lines.append(f"Where{size}: seed {m.get('seed')}, {m.get('dtype')}, output {m.get('output')} "
                     f"(shape {m.get('shape')}), worst element {m.get('worst_index')}: port {m.get('port')}, "
                     f"original {m.get('original')}; {m.get('bad_elements')} elements off.")
    return "\n".join(x for x in lines if x)
