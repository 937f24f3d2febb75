"""make_task: the HITL agent's way to turn a person's JAX function into a validated task (the same builder as
`maxkernel task new`). The function's file is read only from the drafts folder; the task is written under the data
folder's tasks/."""

from __future__ import annotations

import asyncio
import re

from maxkernel.settings import get_settings
from maxkernel.tools.drafts import DraftError, resolve_draft

__all__ = ["make_task"]


async def make_task(function: str, args: list[str], arg_gens: list[str] | None = None, static: list[str] | None = None,
              name: str = "") -> dict:
    """Makes a benchmark task from the person's own JAX function and validates it; nothing is optimised yet.

    Args:
        function: "FILE.py:FUNCTION" with FILE.py in the person's drafts folder, or "package.module:FUNCTION".
        args: One spec per positional array argument, in order, e.g. ["bf16[T=8192,H=4096]", "f32[4096]"];
            dtypes bf16/f16/f32/fp8/i8/i32/bool; naming a dim (T=8192) lets index ranges refer to it.
        arg_gens: Optional, one per argument: "normal" (floats), "uniform:LO:HI", "int:LO:HI" (HI exclusive,
            may be a dim name), "bool".
        static: Optional keyword arguments bound on every call, e.g. ["eps=1e-5"].
        name: Optional task name (default: the function's name).

    Returns:
        {"ok", "path", "summary", "checks", "smoke", "tolerance", "flops"} for a task that passed every check
        (show the checks to the person and ask before working on it: select_task with "path"); {"ok": false,
        "reason"} when the function was refused (degenerate output, too slow, does not trace); {"error"} for
        input that could not be understood.
    """
    from maxkernel.tasknew import SpecError
    from maxkernel.tasknew.sandboxed import build

    if not isinstance(args, list) or not args or not all(isinstance(a, str) for a in args):
        return {"error": "args must be a list of specs like ['bf16[8192,4096]', 'f32[4096]'], one per argument"}
    where, sep, fn = (function or "").rpartition(":")
    if not sep or not where:
        return {"error": f"function {function!r}: write FILE.py:FUNCTION (FILE.py in the drafts folder) or MODULE:FUNCTION"}
    if where.lower().endswith(".py") and not where.endswith(".py"):
        return {"error": f"function {function!r}: name the file as FILE.py (lower-case .py)"}
    if where.endswith(".py"):
        try:
            where = str(resolve_draft(where))
        except DraftError as exc:
            return {"error": str(exc)}
    elif not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", where):
        return {"error": f"function {function!r} refused: a module is a dotted name (package.module); a file must be "
                         "FILE.py in the drafts folder"}
    task_name = re.sub(r"[^A-Za-z0-9_]+", "_", name or fn).strip("_") or "task"
    out = get_settings().data_dir / "tasks" / task_name
    try:
        # Validation runs the function for seconds: off the server's event loop, as judge_kernel does.
        report = await asyncio.to_thread(build, f"{where}:{fn}", args, out, gens=arg_gens or [],
                                         static=static or [], name=task_name, force=True)
    except SpecError as exc:
        return {"error": str(exc)}
    if not report.ok:
        return {"ok": False, "reason": report.reason, "summary": report.summary}
    return {"ok": True, "path": report.path, "summary": report.summary, "checks": report.checks,
            "smoke": report.smoke, "tolerance": report.tolerance, "flops": report.flops}
