"""`program_folder` where the program's code may not run in this process (the MCP server): its file (and the
--inputs file) go to a sandboxed job (tasknew/program_job.py) that traces, counts and writes the task folder in its
scratch; the folder's regular files come back through copy-out and are written under `root` here, named by a hash
of what was asked and of the files' bytes (a repeated call is a cache hit and starts no job)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from maxkernel.tasknew import specs as S
from maxkernel.tasknew.sandboxed import write_taken

__all__ = ["program_in_sandbox", "PROGRAM_TIMEOUT_S"]

PROGRAM_TIMEOUT_S = 600.0  # tracing at full size and counting: seconds; a huge unrolled program, minutes
_MAX_FILE = 4 << 20
_NOTES = "program.json"


def _file(spec: str, flag: str) -> tuple[Path, str]:
    """(the file, the function) of FILE.py:FN; a module name is refused (only files are handed to the job)."""
    where, sep, fn = spec.rpartition(":")
    if not sep or not where.endswith(".py") or not fn.isidentifier():
        raise S.SpecError(f"{flag} {spec!r}: write FILE.py:FUNCTION")
    path = Path(where).expanduser()
    if not path.is_file():
        raise S.SpecError(f"{flag} {spec!r}: no file {where}")
    return path, fn


def program_in_sandbox(function: str, args: list[str], root: Path, *, inputs: str | None = None, gens=None,
                       static=None, parallel=None, flops: int | None = None) -> tuple[Path, list[str]]:
    from maxkernel.harness.sandbox.copyout import CopyOutError, read_bytes
    from maxkernel.harness.sandbox.pool import WorkerPool

    if inputs and args:
        raise S.SpecError("give the arguments once: --arg specs or --inputs FILE.py:FN")
    if not inputs and not args:
        raise S.SpecError("give the program's arguments: --arg specs or --inputs FILE.py:FN")
    files: dict[str, bytes] = {}
    named = []
    for spec, flag in ((function, "--program"), (inputs, "--inputs")):
        if not spec:
            named.append(None)
            continue
        path, fn = _file(spec, flag)
        try:
            data = read_bytes(path.parent, path.name, _MAX_FILE)
        except (CopyOutError, OSError) as exc:
            raise S.SpecError(f"{flag} {spec!r}: {exc}") from None
        if files.get(path.name, data) != data:
            raise S.SpecError(f"--program and --inputs name two different files called {path.name}: rename one")
        files[path.name] = data
        named.append(f"{path.name}:{fn}")
    what = [named, list(args), list(gens or []), list(static or []), list(parallel or []), flops]
    digest = hashlib.sha256(json.dumps(what, default=str).encode())
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name])
    key = digest.hexdigest()
    name = f"program_{named[0].rpartition(':')[2]}"
    folder = Path(root) / key[:16] / name
    if (folder / "baseline.py").is_file() and (folder / _NOTES).is_file():
        return folder, json.loads((folder / _NOTES).read_text())
    job = {"kind": "program_build", "function": named[0], "inputs": named[1], "args": list(args),
           "gens": list(gens or []), "static": list(static or []), "parallel": list(parallel or []), "flops": flops,
           "key": key}
    with WorkerPool(size=0) as pool:  # the scratch lives until the pool closes: the files are taken before that
        res = pool.run(job, files, PROGRAM_TIMEOUT_S)
        try:
            taken, notes = _take(res, key, name)
        finally:
            res.cleanup()
    write_taken(folder, taken)
    return folder, notes


def _take(res, key: str, name: str) -> tuple[dict[str, bytes], list[str]]:
    from maxkernel.harness.sandbox.copyout import CopyOutError, read_bytes

    result = res.result or {}
    if res.status != "ok" or result.get("status") != "ok":
        detail = result.get("error") or (res.stderr_tail.strip().splitlines() or [res.status])[-1]
        raise S.SpecError(f"the program could not be traced in its sandboxed job ({res.status}): {detail}"[:600])
    if "spec_error" in result:
        raise S.SpecError(str(result["spec_error"]))
    expected = f"out/{key[:16]}/{name}"
    if result.get("folder") != expected:
        raise S.SpecError(f"the program's job wrote {str(result.get('folder'))[:100]!r}, not {expected}")
    taken = {}
    for file in result.get("files") or []:
        if not (isinstance(file, str) and re.fullmatch(r"[\w.-]+\.(py|json)", file) and not file.startswith(".")):
            raise S.SpecError(f"the program's job named a file {str(file)[:100]!r} that no program folder has")
        try:
            taken[file] = read_bytes(res.scratch, f"{expected}/{file}", _MAX_FILE)
        except CopyOutError as exc:
            raise S.SpecError(f"the program's folder could not be taken: {exc}") from None
    args = taken.get("arguments.json")
    if args is not None:
        try:
            ok = all(isinstance(a, str) for a in json.loads(args))
        except (ValueError, TypeError):
            ok = False
        if not ok:
            raise S.SpecError("the program's job wrote arguments that are not a list of specs")
    if "baseline.py" not in taken or _NOTES not in taken:
        raise S.SpecError("the program's job wrote no baseline.py and program.json")
    notes = json.loads(taken[_NOTES])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise S.SpecError("the program's job wrote notes that are not a list of lines")
    return taken, notes
