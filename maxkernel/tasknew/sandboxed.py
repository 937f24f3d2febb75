"""`build_task` where a function's code may not run in this process (the MCP server): the function's file is handed
to a sandboxed job (tasknew/build_job.py) that imports, validates and writes the task in its scratch
folder; the task's regular files come back through copy-out and are written to `out` here."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from maxkernel.tasknew import specs as S

__all__ = ["build", "build_in_sandbox", "write_taken", "BUILD_TIMEOUT_S"]

BUILD_TIMEOUT_S = 900.0  # tracing at full size, timing and shrinking the smoke size, calibrating: minutes at most
_MAX_FILE = 4 << 20


def build(function: str, args: list[str], out, **kw):
    """build_task where this process may run the function (a person's CLI), else build_in_sandbox: what every
    caller a server can reach uses (build_task itself refuses to import a function there)."""
    from maxkernel.tasknew.build import build_task, check_out
    from maxkernel.tasks import folder_code_is_sandboxed

    if not folder_code_is_sandboxed():
        return build_task(function, args, out, **kw)
    out = Path(out).expanduser()
    check_out(out, kw.pop("force", False))
    return build_in_sandbox(function, args, out, **kw)


def build_in_sandbox(function: str, args: list[str], out: Path, *, gens=None, static=None, smoke=None, flops=None,
                     name: str | None = None, configs=None, progress: Callable[[str], None] = lambda msg: None):
    from maxkernel.harness.sandbox.copyout import CopyOutError, read_bytes
    from maxkernel.tasknew.build import summary

    where, sep, fn = function.rpartition(":")
    if not sep or not where or not fn.isidentifier():
        raise S.SpecError(f"--from {function!r}: write FILE.py:FUNCTION or MODULE:FUNCTION")
    files = {}
    if where.endswith(".py"):  # only this file goes in: a sibling it imports is not there (nor in the task later)
        path = Path(where).expanduser()
        try:
            files[path.name] = read_bytes(path.parent, path.name, _MAX_FILE)
        except (CopyOutError, OSError) as exc:
            raise S.SpecError(f"--from {function!r}: {exc}") from None
        job_fn = f"{path.name}:{fn}"
    else:  # an installed module, imported by name inside the job (whose path has no folder a client can write)
        job_fn = function
    task_name = name or out.name
    job = {"kind": "task_build", "function": job_fn, "args": list(args), "gens": list(gens or []),
           "static": list(static or []), "smoke": list(smoke or []), "flops": flops, "name": task_name,
           "configs": list(configs or [])}
    progress("validating the function in a sandboxed job")
    from maxkernel.harness.sandbox.pool import WorkerPool

    with WorkerPool(size=0) as pool:  # the scratch lives until the pool closes: the files are taken before that
        res = pool.run(job, files, BUILD_TIMEOUT_S)
        try:
            report, taken = _take(res, task_name, function)
        finally:
            res.cleanup()
    if not report.ok:
        return report
    write_taken(out, taken)
    report.path = str(out.resolve())
    report.summary = summary(report)
    return report


def write_taken(out: Path, taken: dict[str, bytes]) -> None:
    """The files a job's copy-out took, as the folder `out` (written beside it, then renamed into place)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for file, data in taken.items():
            (work / file).write_bytes(data)
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        work.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _take(res, task_name: str, function: str):
    """(the job's report, {file: bytes} of the task it wrote) from a finished build job."""
    from maxkernel.harness.sandbox.copyout import CopyOutError, read_bytes
    from maxkernel.tasknew.build import TaskReport

    result = res.result or {}
    if res.status != "ok" or result.get("status") != "ok":
        detail = result.get("error") or (res.stderr_tail.strip().splitlines() or [res.status])[-1]
        return TaskReport(ok=False, name=task_name, function=function, summary=f"REFUSED: the build job failed "
                          f"({res.status})", reason=f"the build job failed ({res.status}): {detail}"[:600]), {}
    if "spec_error" in result:
        raise S.SpecError(result["spec_error"])
    report = TaskReport.model_validate(result["report"])
    report.function = function
    taken = {}
    for file in (result.get("files") or []) if report.ok else []:
        if not (isinstance(file, str) and file.endswith((".py", ".json")) and "/" not in file and file != ".."):
            raise S.SpecError(f"the build job named a file {file!r} that no task has")
        try:
            taken[file] = read_bytes(res.scratch, f"out/{task_name}/{file}", _MAX_FILE)
        except CopyOutError as exc:
            return TaskReport(ok=False, name=task_name, function=function, reason=f"the built task could not be "
                              f"taken: {exc}", summary="REFUSED: the built task could not be taken"), {}
    return report, taken
