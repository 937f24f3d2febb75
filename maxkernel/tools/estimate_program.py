"""estimate_program: how long any JAX function would take on a TPU, estimated on a CPU without a task folder (the
tool behind `maxkernel estimate --program`, served over MCP)."""

from __future__ import annotations

from maxkernel.tools.drafts import DraftError, resolve_draft
from maxkernel.tools.errors import tool_error

__all__ = ["estimate_program"]

_SHOWN = ("ok", "summary", "label", "chip", "estimated_ms", "bound", "floors", "fraction_of_roofline",
          "limits", "error", "hint", "stage", "data_dependent", "under_priced", "uncertainty", "static_cycles_ms", "fit")


def _file_spec(spec: str, what: str) -> str:
    """FILE.py:FN with FILE.py resolved inside the drafts folder (the MCP server's workspace root); DraftError or
    ValueError saying why not."""
    where, sep, fn = (spec or "").rpartition(":")
    if not sep or not where.endswith(".py") or not fn.isidentifier():
        raise ValueError(f"{what} {spec!r}: write FILE.py:FUNCTION, FILE.py in the workspace")
    return f"{resolve_draft(where)}:{fn}"


def estimate_program(program: str, args: list[str] | None = None, inputs: str = "", arg_gens: list[str] | None = None,
                     static: list[str] | None = None, parallel: list[str] | None = None, flops: int = 0,
                     chip: str = "v5e") -> dict:
    """Estimates any JAX function's run time on a TPU chip at the shapes given, on a CPU (libtpu's static profile on
    shrunk shapes, fitted and floored by the roofline): an ESTIMATE, not a measurement. No task folder is needed.

    Args:
        program: "FILE.py:FUNCTION", FILE.py in the workspace: the JAX function to price (jitted as a whole).
        args: One spec per positional array argument, e.g. ["bf16[B=8,T=4096,D=1024]", "f32[1024]"]; or use inputs.
        inputs: Instead of args, "FILE.py:FUNCTION" returning the arguments, called with no arguments and only
            evaluated abstractly (never allocated). Its dims are named D<size>.
        arg_gens: Optional, one per argument: "normal", "uniform:LO:HI", "int:LO:HI", "bool".
        static: Optional keyword arguments bound on every call, e.g. ["eps=1e-5"].
        parallel: Dims whose slices the function computes independently (the estimator shrinks these), e.g. ["B"];
            with inputs, "D4096" (every axis 4096 wide) or "ARG.AXIS" ("0.0": the first argument's first axis
            alone); default: the dim leading every argument.
        flops: The program's FLOP count where XLA's count is wrong (0: counted from the program).
        chip: v4, v5e (default), v5p, v6e or 7x.

    Returns:
        summary, estimated_ms, bound (compute | memory | overhead), floors, fraction_of_roofline, fit, limits
        (what was assumed), uncertainty, under_priced, arguments (the specs priced); or an error with a hint.
    """
    from maxkernel import chips
    from maxkernel.settings import get_settings
    from maxkernel.tasknew.program import program_folder
    from maxkernel.tasknew.specs import SpecError
    from maxkernel.tools.estimate_tpu import estimate_tpu_time

    for name, value in (("args", args), ("arg_gens", arg_gens), ("static", static), ("parallel", parallel)):
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return tool_error(f"{name} must be a list of strings, got {str(value)[:80]!r}",
                              'e.g. args=["bf16[B=8,4096]"], parallel=["B"]')
    if bool(args) == bool(inputs):
        return tool_error("give the program's arguments once: args (specs like bf16[B=8,4096]) or inputs "
                          "(FILE.py:FUNCTION returning them)", 'e.g. args=["bf16[B=8,4096]", "f32[4096]"]')
    canonical = chips.canonical_name(chip or "v5e")
    if canonical is None or not chips.CHIPS[canonical].is_tpu:
        return tool_error(f"unknown TPU chip {chip!r}", "chip: v4, v5e, v5p, v6e or 7x")
    if not isinstance(flops, int) or isinstance(flops, bool) or flops < 0:
        return tool_error(f"flops must be a whole number >= 0, got {flops!r}", "0 counts them from the program")
    try:
        program_spec = _file_spec(program, "program")
        inputs_spec = _file_spec(inputs, "inputs") if inputs else None
    except (DraftError, ValueError) as exc:
        return tool_error(str(exc), "name a FILE.py:FUNCTION inside the workspace root", kind="missing_file")
    try:
        folder, notes, made_for = program_folder(program_spec, list(args or []), get_settings().cache_dir / "programs",
                                       inputs=inputs_spec, gens=list(arg_gens or []), static=list(static or []),
                                       parallel=list(parallel or []), flops=flops or None)
    except SpecError as exc:
        return tool_error(str(exc).replace("--from", "program").replace("--", ""),
                          "fix the specs (see task new's: DTYPE[DIM=SIZE,...]) or name the independent dims with "
                          "parallel")
    r = estimate_tpu_time(str(folder), None, canonical, "full")
    r.limits[:0] = notes
    out = r.model_dump(include=set(_SHOWN))
    out["program"] = program
    out["arguments"] = made_for
    return out
