"""The kernel tools bound to the session: the task, size and chip come from state, kernels from the workspace."""

from __future__ import annotations

from google.adk.tools import ToolContext

from maxkernel.settings import get_settings
from maxkernel.tools.workspace import WorkspaceError, resolve, workspace_dir

__all__ = ["compile_kernel", "test_kernel", "profile_kernel", "estimate_kernel", "tune_kernel"]


def _kernel(path: str, tool_context: ToolContext) -> str:
    target = resolve(workspace_dir(tool_context), path)
    if not target.is_file():
        raise WorkspaceError(f"no file {path!r} in the workspace: write the kernel first")
    return str(target)


def compile_kernel(tool_context: ToolContext, path: str = "kernel.py", chip: str = "") -> dict:
    """Compiles the kernel for the target TPU chip (real Mosaic/XLA:TPU compiler, no TPU needed) at full size.

    Args:
        path: Kernel file in the workspace (default kernel.py).
        chip: v4, v5e, v5p, v6e or 7x; default the session's chip.

    Returns:
        ok, summary, the compiler's error text and a hint when it fails, VMEM use vs the chip's limit.
    """
    from maxkernel.tools.compile_pallas import compile_pallas

    try:
        kernel = _kernel(path, tool_context)
    except WorkspaceError as exc:
        return {"ok": False, "summary": str(exc)}
    chip = chip or tool_context.state.get("chip") or get_settings().chip
    return compile_pallas(tool_context.state["task"], kernel, chip, "full").model_dump()


def test_kernel(tool_context: ToolContext, path: str = "kernel.py") -> dict:
    """Runs the task's fixed correctness tests (several seeds, strict TPU interpreter: races, out-of-bounds
    reads, NaN-initialised scratch) on the kernel, in a sandbox. Tolerances are fixed by the task.

    Args:
        path: Kernel file in the workspace (default kernel.py).

    Returns:
        ok, summary, and per-seed mismatches (which output, how many elements, worst location, grid block).
    """
    from maxkernel.tools.run_tests import run_tests

    try:
        kernel = _kernel(path, tool_context)
    except WorkspaceError as exc:
        return {"ok": False, "summary": str(exc)}
    return run_tests(tool_context.state["task"], kernel, tool_context.state.get("size", "smoke")).model_dump()


def profile_kernel(tool_context: ToolContext, path: str = "kernel.py") -> dict:
    """Profiles the kernel against the task's baseline: per-op table, kernel time, roofline reading.

    Args:
        path: Kernel file in the workspace (default kernel.py).

    Returns:
        summary, kernel_ms, baseline_ms, top ops, roofline (compute- or memory-bound), trace path.
    """
    from maxkernel.tools.xprof_capture import xprof_capture

    try:
        kernel = _kernel(path, tool_context)
    except WorkspaceError as exc:
        return {"ok": False, "summary": str(exc)}
    out = workspace_dir(tool_context) / "profiles"
    r = xprof_capture(tool_context.state["task"], kernel, tool_context.state.get("size", "smoke"),
                      out_dir=str(out / f"{len(list(out.glob('*'))) if out.exists() else 0}"),
                      chip=tool_context.state.get("chip") or get_settings().chip)
    d = r.model_dump()
    d["ops"] = d["ops"][:8]
    d.pop("baseline_ops", None)
    return d


def estimate_kernel(tool_context: ToolContext, path: str = "kernel.py") -> dict:
    """Estimates the kernel's TPU time at full size on the session's chip, and the XLA baseline's, without a TPU.

    From libtpu's static profile on shrunk shapes, floored by the roofline: an ESTIMATE, not a measurement. It says
    what limits the kernel: bound (compute, memory, or overhead = far above both floors: small tiles, per-step
    cost), fraction_of_roofline, and the floors.

    Args:
        path: Kernel file in the workspace (default kernel.py).

    Returns:
        summary, estimated_ms, baseline_estimated_ms, speedup_estimate, bound, floors, fraction_of_roofline, limits.
    """
    from maxkernel.tools.estimate_tpu import estimate_tpu_time

    try:
        kernel = _kernel(path, tool_context)
    except WorkspaceError as exc:
        return {"ok": False, "summary": str(exc)}
    chip = tool_context.state.get("chip") or get_settings().chip
    r = estimate_tpu_time(tool_context.state["task"], kernel, chip, "full")
    return r.model_dump(include={"ok", "summary", "label", "chip", "estimated_ms", "baseline_estimated_ms",
                                 "speedup_estimate", "bound", "floors", "fraction_of_roofline", "limits", "error",
                                 "hint", "data_dependent"})


def tune_kernel(tool_context: ToolContext, path: str = "kernel.py", max_configs: int = 8) -> dict:
    """Searches the kernel's TUNABLES (block sizes...): compile-prunes, checks correctness, times survivors.

    Args:
        path: Kernel file in the workspace (default kernel.py).
        max_configs: At most this many compiling configurations are run.

    Returns:
        best config with its time and speedup over the default, counts of pruned/incorrect/failed.
    """
    from maxkernel.tools.autotune import autotune

    try:
        kernel = _kernel(path, tool_context)
    except WorkspaceError as exc:
        return {"ok": False, "summary": str(exc)}
    r = autotune(tool_context.state["task"], kernel, chip=tool_context.state.get("chip") or get_settings().chip,
                 size=tool_context.state.get("size", "smoke"), max_configs=max_configs)
    d = r.model_dump()
    d["tried"] = d["tried"][:12]
    return d
