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

__all__ = ["TaskReport", "build_task", "resolve_function"]

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
        raise S.SpecError(f"the function takes {len(required)} to {len(positional)} array arguments ({names}) after "
                          f"--static, but {n} --arg were given")
    return [positional[i].name if i < len(positional) else f"arg{i}" for i in range(n)]


def build_task(function: str, args: list[str], out: str | Path, *, gens: list[str] | None = None,
               static: list[str] | None = None, smoke: list[str] | None = None, flops: int | None = None,
               name: str | None = None, force: bool = False,
               progress: Callable[[str], None] = lambda msg: None) -> TaskReport:
    """Write and validate the task; SpecError for input that cannot be understood (usage), a report with ok=False
    (and nothing written) when the function is refused."""
    out = Path(out).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise S.SpecError(f"--out {out} exists and is not empty (pass --force to replace it)")
    if not args:
        raise S.SpecError("give at least one --arg DTYPE[DIMS]")
    gens = list(gens or [])
    if len(gens) > len(args):
        raise S.SpecError(f"{len(gens)} --arg-gen for {len(args)} --arg (one per argument, in order)")
    statics = dict(S.parse_static(s) for s in static or [])
    parsed = [S.parse_arg(a) for a in args]
    gen_specs = [S.parse_gen(gens[i] if i < len(gens) else "", dtype) for i, (dtype, _) in enumerate(parsed)]
    config, arg_specs = S.name_dims(parsed, gen_specs)
    lanes = S.lane_dims(arg_specs)
    sizes = S.smoke_dims(config, lanes)
    for item in smoke or []:
        dim, value = S.parse_static(item)
        if dim not in config or not isinstance(value, int) or value <= 0:
            raise S.SpecError(f"--smoke {item!r}: write DIM=INT for one of the dims ({', '.join(config)})")
        sizes[dim] = value
    fn, source, copy = resolve_function(function)
    arg_names = _positional_names(fn, len(arg_specs), statics)
    task_name = name or out.name
    doc = f"{source['function']} from {Path(copy).name if copy else source['module']}, made a task by `maxkernel task new`."
    rows = [(n, s.dtype, s.dims, s.gen) for n, s in zip(arg_names, arg_specs)]
    facts = dict(name=task_name, doc=doc, config=config, args=rows, source=source, static=statics)
    report = TaskReport(ok=False, summary="", name=task_name, function=function, config=config)

    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        if copy:
            shutil.copyfile(copy, work / _SOURCE_FILE)
        try:
            checks, final = _validate(work, facts, sizes, lanes, flops, progress)
        except validate.Refused as exc:
            report.reason = str(exc)
            report.summary = f"REFUSED: {exc}"
            return report
        report.checks = [c.__dict__ for c in checks]
        report.smoke, report.tolerance = final["sizes"]["smoke"], final["tolerance"]
        report.flops, report.bytes_accessed = final["flops"], final["bytes_accessed"]
        report.ok, report.path = True, str(out.resolve())
        (work / "validation.json").write_text(json.dumps(report.model_dump(exclude={"summary"}), indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        work.rename(out)
        report.summary = _summary(report)
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write(work: Path, facts: dict, sizes: dict, tolerance: dict, flops: dict, nbytes: dict) -> None:
    (work / "baseline.py").write_text(template.render(**facts, sizes={"smoke": sizes}, tolerance=tolerance,
                                                      flops=flops, bytes_accessed=nbytes))


def _load(work: Path, attempt: int):
    from maxkernel.tasks import Task

    # A fresh module name per attempt: the loader caches modules by name and the file is rewritten between steps.
    return Task(name=f"{work.name}_{attempt}", path=work, source="folder")


def _validate(work: Path, facts: dict, sizes: dict, lanes: set, flops_override: int | None, progress) -> tuple[list, dict]:
    attempt = 0
    _write(work, facts, sizes, {}, {}, {})
    task = _load(work, attempt)
    progress("tracing the function at full size")
    traced, _ = validate.trace_full(task)
    checks = [traced]
    progress("timing the smoke size")
    timed = validate.time_smoke(task)
    while not timed.ok and attempt < _MAX_SHRINKS:
        smaller = S.shrink_further(facts["config"], sizes, lanes)
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
    checks.append(timed)
    progress("pricing it with XLA's cost analysis")
    full, small = validate.costs(task, "full"), validate.costs(task, "smoke")
    flops = {"full": flops_override or full["flops"], "smoke": small["flops"]}
    if flops_override and full["flops"] and small["flops"]:
        flops["smoke"] = int(round(small["flops"] * flops_override / full["flops"]))
    nbytes = {"full": full["bytes"], "smoke": small["bytes"]}
    checks.append(validate.Check("FLOPs and bytes", flops["full"] is not None,
                                 f"{flops['full']} FLOPs, {nbytes['full']} bytes at full size" +
                                 (" (FLOPs from --flops)" if flops_override else "") +
                                 ("" if flops["full"] else "; FLOPs unknown: pass --flops N")))
    progress("calibrating the tolerance")
    calibrated, tolerance = validate.calibrate(task)
    checks.append(calibrated)
    progress("checking the output is not degenerate")
    checks.append(validate.degenerate_leaves(task, tolerance))
    _write(work, facts, sizes, tolerance, flops, nbytes)
    _load(work, attempt + 1).create_inputs(size="smoke", seed=0)  # the final file loads
    return checks, {"sizes": {"smoke": sizes}, "tolerance": tolerance, "flops": flops, "bytes_accessed": nbytes}


def _summary(r: TaskReport) -> str:
    lines = [f"OK: task {r.name} written to {r.path}"]
    lines += [f"  {'ok  ' if c['ok'] else 'note'} {c['name']}: {c['detail']}" for c in r.checks]
    lines.append(f"next: maxkernel evaluate --task {r.path} --kernel YOUR_KERNEL.py   "
                 f"(or maxkernel optimize --task {r.path})")
    return "\n".join(lines)
