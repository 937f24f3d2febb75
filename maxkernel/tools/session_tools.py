"""The kernel tools bound to the session: the task, size and chip come from state, kernels from the workspace."""

from __future__ import annotations

from google.adk.tools import ToolContext

from maxkernel import chips
from maxkernel.settings import get_settings
from maxkernel.tools.errors import tool_error
from maxkernel.tools.workspace import WorkspaceError, resolve, workspace_dir

__all__ = ["compile_kernel", "test_kernel", "evaluate_kernel", "profile_kernel", "estimate_kernel", "tune_kernel"]


def _kernel(path: str, tool_context: ToolContext) -> str:
    target = resolve(workspace_dir(tool_context), str(path or "kernel.py"))
    if not target.is_file():
        raise WorkspaceError(f"no file {path!r} in the workspace: write the kernel first")
    return str(target)


def _chip(chip: str, tool_context: ToolContext) -> str:
    """The chip a model named, read leniently ("TPU v5e" is v5e); the session's chip when none is named."""
    name = str(chip or "").strip() or tool_context.state.get("chip") or get_settings().chip
    canonical = chips.canonical_name(name)
    if canonical is None or not chips.CHIPS[canonical].is_tpu and canonical not in ("h100", "h200"):
        raise WorkspaceError(f"unknown chip {chip!r}")
    return canonical


def _bad(exc: Exception) -> dict:
    text = str(exc)
    if text.startswith("unknown chip"):
        return tool_error(text, "valid chips: v4, v5e, v5p, v6e, 7x (\"TPU v5e\", \"v5litepod\" also work); "
                          "or leave chip empty for the session's chip")
    return tool_error(text, "give a file in the workspace (list_files shows them), e.g. kernel.py",
                      kind="missing_file" if text.startswith("no file") else "bad_argument")


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
        kernel, chip = _kernel(path, tool_context), _chip(chip, tool_context)
    except WorkspaceError as exc:
        return _bad(exc)
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
        return _bad(exc)
    return run_tests(tool_context.state["task"], kernel, tool_context.state.get("size", "smoke")).model_dump()


def evaluate_kernel(tool_context: ToolContext, path: str = "kernel.py", seeds: int = 3) -> dict:
    """The harness's trusted verdict on the kernel: sandboxed, fresh seeds, integrity checks, timing against the
    baseline. The same record as `maxkernel evaluate --json`.

    Args:
        path: Kernel file in the workspace (default kernel.py).
        seeds: Number of fresh input seeds (1 to 8, default 3).

    Returns:
        status (correct, incorrect, error, timeout, rejected), reason, correctness (error vs tolerance per seed),
        kernel and baseline timing, speedup, integrity, flags, hint.
    """
    from maxkernel.harness.verdict.evaluate import evaluate

    try:
        kernel = _kernel(path, tool_context)
    except WorkspaceError as exc:
        return _bad(exc)
    try:
        seeds = max(1, min(int(seeds), 8))
    except (TypeError, ValueError):
        return tool_error(f"seeds must be a whole number, got {seeds!r}", "e.g. seeds=3")
    v = evaluate(tool_context.state["task"], kernel, size=tool_context.state.get("size", "smoke"), seeds=[0] * seeds)
    return v.model_dump()


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
        return _bad(exc)
    # Under the workspace, every folder on the way opened without following a link (tools/safepath.py).
    r = xprof_capture(tool_context.state["task"], kernel, tool_context.state.get("size", "smoke"),
                      out_root=str(workspace_dir(tool_context)),
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
        summary, estimated_ms, baseline_estimated_ms, speedup_estimate, bound, floors, fraction_of_roofline, limits,
        under_priced (why the static profile is below the task's floor, when it is: a rough figure, not a ranking).
    """
    from maxkernel.tools.estimate_tpu import estimate_tpu_time

    try:
        kernel = _kernel(path, tool_context)
    except WorkspaceError as exc:
        return _bad(exc)
    chip = tool_context.state.get("chip") or get_settings().chip
    r = estimate_tpu_time(tool_context.state["task"], kernel, chip, "full")
    return r.model_dump(include={"ok", "summary", "label", "chip", "estimated_ms", "baseline_estimated_ms",
                                 "speedup_estimate", "bound", "floors", "fraction_of_roofline", "limits", "error",
                                 "hint", "data_dependent", "under_priced"})


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
        return _bad(exc)
    try:
        max_configs = max(1, min(int(max_configs), 64))
    except (TypeError, ValueError):
        return tool_error(f"max_configs must be a whole number, got {max_configs!r}", "e.g. max_configs=8")
    r = autotune(tool_context.state["task"], kernel, chip=tool_context.state.get("chip") or get_settings().chip,
                 size=tool_context.state.get("size", "smoke"), max_configs=max_configs)
    if r.ok and r.best:
        # The loop writes these values into the kernel file and has the harness judge the tuned file.
        tool_context.state["last_tune"] = {"path": path, "config": r.best.get("config"), "default": r.default,
                                           "speedup_vs_default": r.best.get("speedup_vs_default"),
                                           "timing_label": r.timing_label}
    d = r.model_dump()
    d["tried"] = d["tried"][:12]
    return d
