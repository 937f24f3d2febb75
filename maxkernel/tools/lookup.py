"""Reference lookups for agents: the installed Pallas API, the chip table, and the task being optimised."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from google.adk.tools import ToolContext

__all__ = ["pallas_api", "chip_specs", "list_tasks", "task_info", "read_example", "examples_for"]


def pallas_api(name: str) -> dict:
    """Looks up a Pallas (or jax.numpy / jax.lax) name in the installed JAX: its signature, the import line
    it needs, and the installed spelling when the name is an older one or sits under the wrong prefix.

    Args:
        name: e.g. "pallas_call", "pl.BlockSpec", "pltpu.CompilerParams", "pltpu.make_async_copy",
            "lax.fori_loop"; an old name like "TPUCompilerParams" is answered with what replaced it.

    Returns:
        {"name", "import", "kind", "signature", "doc", "jax"} plus "note" / "renamed_from" when the spelling
        asked differs, or {"error", "candidates"} listing close names.
    """
    from maxkernel.knowledge import lookup

    return lookup(name)


def chip_specs(chip: str) -> dict:
    """The limits and peak rates of a chip: VMEM (scoped default and total), SMEM, peak bf16 FLOP/s, HBM
    bandwidth, and the ridge point (FLOPs per byte above which a kernel is compute-bound).

    Args:
        chip: v4, v5e, v5p, v6e, 7x, h100, h200 or cpu.
    """
    from maxkernel import chips

    try:
        c = chips.get(chip)
    except ValueError as exc:
        return {"error": str(exc)}
    d = dataclasses.asdict(c)
    d["ridge_flops_per_byte"] = round(chips.ridge_point(c), 1)
    return d


def list_tasks(suite: str = "jaxbench") -> dict:
    """The benchmark's tasks: one row each with its name, suite, tier, whether a reference kernel ships with it,
    the TPU chips its full size fits and its named configs (the rows of `maxkernel bench list --json`).

    Args:
        suite: "jaxbench" (the 50 JAXBench tasks, default), "realworld" or "all".

    Returns:
        {"tasks": [{"name", "suite", "tier", "source", "reference_kernel", "fits_chips", "configs", "model"}]}
        or {"error"} for an unknown suite.
    """
    from maxkernel.bench import list_tasks as rows

    if suite not in ("jaxbench", "realworld", "all"):
        return {"error": f"unknown suite {suite!r}: jaxbench, realworld or all"}
    return {"tasks": rows(suite)}


def task_info(tool_context: ToolContext) -> dict:
    """The task being optimised: its reference code (baseline.py), configuration, input shapes and dtypes at
    the session's size, output dtype, error tolerance and FLOPs; and the path of a shipped reference kernel
    to learn from, if one exists (reading it is allowed).
    """
    from maxkernel.tasks import load_task

    task = load_task(tool_context.state["task"])
    size = tool_context.state.get("size", "smoke")
    shapes, leaves = task.structs(size)  # a folder task's, in a sandboxed job where its code may not run here
    # A folder task's files are read without following links (one could name any file this process can read).
    own = task.files() if task.source == "folder" else {"baseline.py": task.baseline_source().encode()}
    # A task made by `maxkernel task new` keeps the user's function beside baseline.py: the reference is there.
    beside = {name: data.decode(errors="replace")[:8000] for name, data in own.items()
              if name.endswith(".py") and name not in ("baseline.py", "kernel.py")}
    return {
        "task": task.name, "size": size, "config": task.config,
        "inputs": [f"{s.dtype}{list(s.shape)}" for s in shapes],
        "outputs": [f"{o.dtype}{list(o.shape)}" for o in leaves],
        "tolerance": {str(o.dtype): task.tolerance(str(o.dtype)) for o in leaves},
        "flops": task.flops(size), "baseline_py": own.get("baseline.py", b"").decode(errors="replace"),
        **({"reference_files": beside} if beside else {}),
        "examples": "read_example() shows the real kernels closest to this task (jax's own ops, the suite's, "
                    "proven ones)",
    }


def read_example(tool_context: ToolContext, task: str = "") -> dict:
    """Real Pallas kernels like the one this task needs: the closest of the suite's reference kernels, the
    kernels that ship inside the installed jax (flash/splash/paged attention, megablox gmm, matmul, ...) and
    kernels proven correct here before, matched by what the task computes; as excerpts with their paths.

    Args:
        task: Optional. Another suite task whose reference kernel to show first (e.g. 8p_GEMM for the house
            style of a tiled matmul); empty: the examples closest to the session's own task.

    Returns:
        {"examples": [{"path", "kind", "excerpt"}]} (kind: suite, jax-tpu, jax-gpu or proven) or {"error"}.
    """
    from maxkernel.knowledge.examples import excerpt
    from maxkernel.tasks import TaskError, load_task

    own = tool_context.state.get("task") or ""
    shown = []
    if task and task != own and Path(own).name != task:
        try:
            kernel = load_task(task).reference_kernel
        except TaskError as exc:
            return {"error": str(exc)}
        if kernel is not None:
            shown.append({"path": f"jaxbench/{task}/kernel.py", "kind": "suite", "excerpt": excerpt(str(kernel))})
    matches = examples_for(own, k=2) if own else []
    for m in matches:
        if len(shown) < 2 and all(m["path"] != e["path"] for e in shown):
            shown.append({"path": m["path"], "kind": m["kind"], "excerpt": excerpt(m["file"])})
    if not shown:
        return {"error": "no task chosen and no suite task named: pass task, e.g. 8p_GEMM"}
    return {"examples": shown}


def examples_for(task_spec: str, k: int = 2) -> list[dict]:
    """Retrieval for a session's task (a suite name or a folder); [] when the task cannot be loaded."""
    from maxkernel.knowledge.examples import search
    from maxkernel.tasks import TaskError, load_task

    try:
        task = load_task(task_spec)
    except (TaskError, OSError, ValueError):
        return []
    return search(task, k=k)
