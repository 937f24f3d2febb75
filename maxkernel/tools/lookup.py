"""Reference lookups for agents: the installed Pallas API, the chip table, and the task being optimised."""

from __future__ import annotations

import dataclasses

from google.adk.tools import ToolContext

__all__ = ["pallas_api", "chip_specs", "task_info", "read_example"]

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


def task_info(tool_context: ToolContext) -> dict:
    """The task being optimised: its reference code (baseline.py), configuration, input shapes and dtypes at
    the session's size, output dtype, error tolerance and FLOPs; and the path of a shipped reference kernel
    to learn from, if one exists (reading it is allowed).
    """
    import jax

    from maxkernel.tasks import load_task

    task = load_task(tool_context.state["task"])
    size = tool_context.state.get("size", "smoke")
    shapes = jax.eval_shape(lambda: task.create_inputs(size=size, seed=0))
    outs = jax.eval_shape(task.module.workload, *shapes)
    leaves = jax.tree_util.tree_leaves(outs)
    return {
        "task": task.name, "size": size, "config": task.config,
        "inputs": [f"{s.dtype}{list(s.shape)}" for s in shapes],
        "outputs": [f"{o.dtype}{list(o.shape)}" for o in leaves],
        "tolerance": {str(o.dtype): task.tolerance(str(o.dtype)) for o in leaves},
        "flops": task.flops(size), "baseline_py": task.baseline_file.read_text(),
        "examples": "read_example(task) shows the reference kernel of another suite task",
    }


def read_example(task: str, tool_context: ToolContext) -> dict:
    """Reads the shipped hand-written Pallas kernel of another suite task, as an example of the house style.

    Args:
        task: A suite task with a reference kernel: 8p_GEMM, 12p_RMSNorm, 1p_Flash_Attention,
            41k_Gemm_Add_ReLU or 50k_Matmul_GELU_Softmax. The session's own task is refused.

    Returns:
        {"task", "content"} or {"error"}.
    """
    from maxkernel.tasks import TaskError, load_task

    if task == tool_context.state.get("task"):
        return {"error": "the reference kernel of the task being optimised is not shown: write your own"}
    try:
        kernel = load_task(task).reference_kernel
    except TaskError as exc:
        return {"error": str(exc)}
    if kernel is None:
        return {"error": f"{task} has no reference kernel; try 8p_GEMM, 12p_RMSNorm, 1p_Flash_Attention, "
                         "41k_Gemm_Add_ReLU or 50k_Matmul_GELU_Softmax"}
    return {"task": task, "content": kernel.read_text()}
