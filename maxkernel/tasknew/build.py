"""`maxkernel task new`: a user's JAX function and argument specs become a validated task folder in the public
JAXBench layout (baseline.py, the function's source beside it, validation.json), or a refusal with the reason.
Nothing is written to the output folder unless every check passes."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from maxkernel.tasknew import specs as S
from maxkernel.tasknew import template, validate

__all__ = ["TaskReport", "build_task", "check_out", "resolve_function", "summary"]

_MAX_SHRINKS = 8
_SOURCE_FILE = "function.py"


class TaskReport(BaseModel):
    ok: bool
    summary: str
    path: str | None = None
    name: str = ""
    function: str = ""
    reason: str | None = Field(None, description="Why the function was refused, when it was.")
    checks: list[dict] = Field(default_factory=list)
    config: dict = Field(default_factory=dict)
    configs: dict = Field(default_factory=dict, description="Named configs: overrides of config, the first the default.")
    smoke: dict = Field(default_factory=dict)
    tolerance: dict = Field(default_factory=dict)
    flops: dict = Field(default_factory=dict)
    bytes_accessed: dict = Field(default_factory=dict)


@contextlib.contextmanager
def _cwd_importable():
    sys.path.insert(0, str(Path.cwd()))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(Path.cwd()))


def resolve_function(spec: str) -> tuple[Callable, dict, Path | None]:
    """'path/to/file.py:fn' or 'package.module:fn' -> (the function, SOURCE, the file to copy beside the task or
    None when the module is installed and importable by name)."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise S.SpecError(f"--from {spec!r}: write FILE.py:FUNCTION or MODULE:FUNCTION")
    from maxkernel.tasks import folder_code_is_sandboxed

    if folder_code_is_sandboxed():  # fail closed: the function is imported only inside its sandboxed build job
        raise S.SpecError(f"--from {spec!r}: a function is imported only in a sandboxed job in this process")
    if where.endswith(".py"):
        path = Path(where).expanduser()
        if not path.is_file():
            raise S.SpecError(f"--from {spec!r}: no file {where}")
        mod_spec = importlib.util.spec_from_file_location(f"_maxkernel_user_{abs(hash(str(path.resolve())))}", path)
        module = importlib.util.module_from_spec(mod_spec)
        try:
            with _cwd_importable():
                mod_spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001  (the user's file can raise anything on import)
            raise S.SpecError(f"--from {spec!r}: importing {where} failed: {type(exc).__name__}: {exc}") from None
        copy = path
    else:
        try:
            with _cwd_importable():
                module = importlib.import_module(where)
        except Exception as exc:  # noqa: BLE001
            raise S.SpecError(f"--from {spec!r}: cannot import {where}: {type(exc).__name__}: {exc}") from None
        file = Path(getattr(module, "__file__", "") or "")
        installed = any(part in ("site-packages", "dist-packages") for part in file.parts)
        copy = None if installed else file
    fn = getattr(module, name, None)
    if not callable(fn):
        raise S.SpecError(f"--from {spec!r}: {name} is not a function in {where}")
    source = {"file": _SOURCE_FILE if copy else "", "module": "" if copy else where, "function": name}
    return fn, source, copy


def _positional_names(fn, n: int, static: dict) -> list[str]:
    """The names of the first `n` parameters that are not bound by --static; a mismatch is a usage error."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values() if p.name not in static]
    except (TypeError, ValueError):
        return [f"arg{i}" for i in range(n)]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    if n < len(required) or (n > len(positional) and not varargs):
        names = ", ".join(p.name for p in positional)
        count = (f"{len(required)}" if len(required) == len(positional) and not varargs
                 else f"{len(required)} or more" if varargs else f"{len(required)} to {len(positional)}")
        given = f"{n} --arg {'was' if n == 1 else 'were'} given"
        raise S.SpecError(f"the function takes {count} array argument{'s' if count != '1' else ''} ({names}) after "
                          f"--static, but {given}")
    return [positional[i].name if i < len(positional) else f"arg{i}" for i in range(n)]


def check_out(out: Path, force: bool) -> None:
    """SpecError unless `out` may be written: absent, empty, or (with force) a task folder."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise S.SpecError(f"--out {out} exists and is not empty (pass --force to replace it)")
        if not (out / "baseline.py").is_file():  # --force replaces a task folder, never an arbitrary one
            raise S.SpecError(f"--out {out} is not a task folder (no baseline.py): --force only replaces task folders")


def build_task(function: str, args: list[str], out: str | Path, *, gens: list[str] | None = None,
               static: list[str] | None = None, smoke: list[str] | None = None, flops: int | None = None,
               name: str | None = None, force: bool = False, configs: list[str] | None = None,
               progress: Callable[[str], None] = lambda msg: None) -> TaskReport:
    """Write and validate the task; SpecError for input that cannot be understood (usage), a report with ok=False
    (and nothing written) when the function is refused. It imports the function: where that may not happen (the
    MCP server) it refuses, and tasknew.sandboxed.build runs it in a sandboxed job instead."""
    out = Path(out).expanduser()
    check_out(out, force)
    statics, config, arg_specs = S.parse_specs(args, gens, static)
    lanes = S.lane_dims(arg_specs)
    sizes = S.smoke_dims(config, lanes)
    for item in smoke or []:
        dim, value = S.parse_static(item)
        if dim not in config or not isinstance(value, int) or value <= 0:
            raise S.SpecError(f"--smoke {item!r}: write DIM=INT for one of the dims ({', '.join(config)})")
        sizes[dim] = value
    named = [S.parse_config(c, config, i == 0) for i, c in enumerate(configs or [])]
    if len({n for n, _ in named}) != len(named):
        raise S.SpecError("--config names must differ")
    config_table = dict(named) if len(named) > 1 else {}
    fn, source, copy = resolve_function(function)
    arg_names = _positional_names(fn, len(arg_specs), statics)
    task_name = name or out.name
    doc = f"{source['function']} from {Path(copy).name if copy else source['module']}, made a task by `maxkernel task new`."
    rows = [(n, s.dtype, s.dims, s.gen) for n, s in zip(arg_names, arg_specs)]
    facts = dict(name=task_name, doc=doc, config=config, args=rows, source=source, static=statics,
                 configs=config_table, lanes=lanes)
    report = TaskReport(ok=False, summary="", name=task_name, function=function, config=config, configs=config_table)

    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        if copy:
            shutil.copyfile(copy, work / _SOURCE_FILE)
        try:
            checks, final = _validate(work, facts, sizes, flops, progress)
        except validate.Refused as exc:
            report.reason = str(exc)
            report.summary = f"REFUSED: {exc}"
            return report
        except Exception as exc:  # noqa: BLE001  (the user's function, e.g. on f32-widened or another seed's inputs)
            first = (str(exc).splitlines() or [""])[0][:300]
            report.reason = (f"the function failed while being validated: {type(exc).__name__}: {first} (it must run "
                             "on every seed's inputs and on the same inputs widened to f32, where the reference runs)")
            report.summary = f"REFUSED: {report.reason}"
            return report
        report.checks = [c.__dict__ for c in checks]
        report.smoke, report.tolerance = final["sizes"]["smoke"], final["tolerance"]
        report.flops, report.bytes_accessed = final["flops"], final["bytes_accessed"]
        report.ok, report.path = True, str(out.resolve())
        (work / "validation.json").write_text(json.dumps(report.model_dump(exclude={"summary"}), indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        work.rename(out)
        report.summary = summary(report)
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write(work: Path, facts: dict, sizes: dict, tolerance: dict, flops: dict, nbytes: dict) -> None:
    """baseline.py with the smoke dims `sizes`; each further config gets its own smoke dims for the dims it
    overrides (decode's T=1 stays 1, a long config's T=32768 shrinks like the default's)."""
    table = {"smoke": sizes}
    for name, overrides in list(facts["configs"].items())[1:]:
        shrunk = {d: v for d, v in S.smoke_dims(overrides, facts["lanes"]).items() if v != overrides[d]}
        if shrunk:
            table[f"smoke@{name}"] = shrunk
    render = {k: v for k, v in facts.items() if k != "lanes"}
    (work / "baseline.py").write_text(template.render(**render, sizes=table, tolerance=tolerance, flops=flops,
                                                      bytes_accessed=nbytes))


def _load(work: Path, attempt: int):
    from maxkernel.tasks import Task

    # A fresh module name per attempt: the loader caches modules by name and the file is rewritten between steps.
    return Task(name=f"{work.name}_{attempt}", path=work, source="folder")


def _smoke_that_runs(work: Path, facts: dict, sizes: dict, progress):
    """The smoke dims shrunk until a run takes under SMOKE_SECONDS; (task, sizes, the timing check)."""
    attempt = 0
    _write(work, facts, sizes, {}, {}, {})
    task = _load(work, attempt)
    progress("tracing the function at full size")
    traced, _ = validate.trace_full(task)
    progress("timing the smoke size")
    timed = validate.time_smoke(task)
    while not timed.ok and attempt < _MAX_SHRINKS:
        smaller = S.shrink_further(facts["config"], sizes, facts["lanes"])
        if smaller is None:
            break
        sizes, attempt = smaller, attempt + 1
        _write(work, facts, sizes, {}, {}, {})
        task = _load(work, attempt)
        progress(f"smoke run took {timed.data['run_s']:.2f} s; shrinking to {sizes}")
        timed = validate.time_smoke(task)
    if not timed.ok:
        raise validate.Refused(f"the smaller size {sizes} still takes {timed.data['run_s']:.1f} s a run on this CPU "
                               f"(at most {validate.SMOKE_SECONDS:g} s): give smaller smoke dims with --smoke DIM=INT")
    return task, sizes, [traced, timed], attempt


def _validate(work: Path, facts: dict, sizes: dict, flops_override: int | None, progress) -> tuple[list, dict]:
    task, sizes, checks, attempt = _smoke_that_runs(work, facts, sizes, progress)
    names = list(facts["configs"])
    pairs = task.config_sizes("smoke") or {"": "smoke"}  # config -> its smoke size name ("" when just one)
    for name, smoke in list(pairs.items())[1:]:
        where = f" [{name}]"
        progress(f"checking config {name}")
        traced, _ = validate.trace_full(task, smoke.replace("smoke", "full", 1))
        timed = validate.time_smoke(task, smoke)
        if not timed.ok:
            raise validate.Refused(f"config {name}: a smoke run takes {timed.data['run_s']:.1f} s on this CPU (at most "
                                   f"{validate.SMOKE_SECONDS:g} s): give its smoke dims with --smoke or a smaller config")
        checks += [validate.Check(c.name + where, c.ok, c.detail, c.data) for c in (traced, timed)]
    progress("pricing it with XLA's cost analysis")
    flops, nbytes = {}, {}
    for smoke in pairs.values():
        full_size = smoke.replace("smoke", "full", 1)
        full, small = validate.costs(task, full_size), validate.costs(task, smoke)
        flops[full_size], flops[smoke] = full["flops"], small["flops"]
        nbytes[full_size], nbytes[smoke] = full["bytes"], small["bytes"]
    if flops_override:  # the user's count for the default config at full size; the others scale with XLA's
        scale = flops_override / flops["full"] if flops.get("full") else None
        flops = {k: (int(round(v * scale)) if scale and v else v) for k, v in flops.items()}
        flops["full"] = flops_override
    checks.append(validate.Check("FLOPs and bytes", flops["full"] is not None,
                                 f"{flops['full']} FLOPs, {nbytes['full']} bytes at full size" +
                                 (" (FLOPs from --flops)" if flops_override else "") +
                                 ("" if flops["full"] else "; FLOPs unknown: pass --flops N")))
    progress("calibrating the tolerance")
    tolerance, own = {}, {}
    for smoke in pairs.values():
        calibrated, tol = validate.calibrate(task, smoke)
        for dt, t in tol.items():
            tolerance[dt] = max(tolerance.get(dt, 0.0), t)
            own[dt] = max(own.get(dt, 0.0), calibrated.data["own_error"][dt])
    checks.append(validate.Check("tolerance calibrated", True, ", ".join(
        f"{dt} {tolerance[dt]:.3g} (own error {own[dt]:.3g})" for dt in tolerance)
        + (f" over configs {', '.join(names)}" if len(pairs) > 1 else ""), {"own_error": own}))
    progress("checking the output is not degenerate")
    for name, smoke in pairs.items():
        try:
            done = validate.degenerate_leaves(task, tolerance, smoke)
        except validate.Refused as exc:
            raise validate.Refused(f"config {name}: {exc}" if name else str(exc)) from None
    checks.append(done if len(pairs) == 1 else validate.Check(done.name, True, done.detail + f", in every config"))
    _write(work, facts, sizes, tolerance, flops, nbytes)
    _load(work, attempt + 1).create_inputs(size="smoke", seed=0)  # the final file loads
    return checks, {"sizes": {"smoke": sizes}, "tolerance": tolerance, "flops": flops, "bytes_accessed": nbytes}


def summary(r: TaskReport) -> str:
    lines = [f"OK: task {r.name} written to {r.path}"]
    lines += [f"  {'ok  ' if c['ok'] else 'note'} {c['name']}: {c['detail']}" for c in r.checks]
    lines.append(f"next: maxkernel evaluate --task {r.path} --kernel YOUR_KERNEL.py   "
                 f"(or maxkernel optimize --task {r.path})")
    return "\n".join(lines)
