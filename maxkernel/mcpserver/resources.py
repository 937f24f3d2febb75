"""What an MCP client can read (task baselines, reference kernels, the chip table, the Pallas cheat sheet) and the
"optimise this task" prompt. Nothing here needs the `mcp` SDK."""

from __future__ import annotations

import dataclasses
import json
import re

__all__ = ["Entry", "TEMPLATES", "resource_list", "read_resource", "ResourceError", "PROMPT_NAME", "PROMPT_ARGS",
           "prompt"]

CHIPS_URI = "maxkernel://chips"
CHEAT_SHEET_URI = "maxkernel://pallas/cheat-sheet"
_TASK_URI = re.compile(r"maxkernel://tasks/(?P<name>[A-Za-z0-9_]+)/(?P<file>baseline\.py|kernel\.py)")


class ResourceError(ValueError):
    """An unknown resource URI; the message says which exist."""


@dataclasses.dataclass(frozen=True)
class Entry:
    uri: str
    name: str
    description: str
    mime_type: str


TEMPLATES = (
    Entry("maxkernel://tasks/{name}/baseline.py", "task baseline",
          "A task's reference code (baseline.py: CONFIG, SIZES, create_inputs, workload, get_flops)", "text/x-python"),
    Entry("maxkernel://tasks/{name}/kernel.py", "reference kernel",
          "The hand-written Pallas kernel shipped with a task, where one exists", "text/x-python"),
)


def resource_list() -> list[Entry]:
    """The chip table, the cheat sheet, and every suite task's baseline and shipped reference kernel."""
    import jaxbench
    from maxkernel.tasks import load_task

    out = [Entry(CHIPS_URI, "chip table", "Peak FLOP/s, HBM bandwidth, VMEM/SMEM and ridge point of every chip",
                 "application/json"),
           Entry(CHEAT_SHEET_URI, "Pallas cheat sheet",
                 "The Pallas API as the installed jax spells it, stamped with the jax version", "text/markdown")]
    for name in jaxbench.task_names("all"):
        task = load_task(name)
        out.append(Entry(f"maxkernel://tasks/{name}/baseline.py", f"{name} baseline", f"{name}: reference code",
                         "text/x-python"))
        if task.reference_kernel is not None:
            out.append(Entry(f"maxkernel://tasks/{name}/kernel.py", f"{name} reference kernel",
                             f"{name}: the shipped Pallas kernel", "text/x-python"))
    return out


def read_resource(uri: str) -> tuple[str, str]:
    """(text, mime type) of a resource; ResourceError for a URI that names none."""
    from maxkernel import chips

    if uri == CHIPS_URI:
        table = {name: {**dataclasses.asdict(c), "ridge_flops_per_byte": round(chips.ridge_point(c), 1)}
                 for name, c in chips.CHIPS.items()}
        return json.dumps(table, indent=2, default=str), "application/json"
    if uri == CHEAT_SHEET_URI:
        from maxkernel.knowledge import cheat_sheet

        return cheat_sheet(), "text/markdown"
    m = _TASK_URI.fullmatch(uri)
    if m:
        import jaxbench
        from maxkernel.tasks import load_task

        if m["name"] not in jaxbench.task_names("all"):
            raise ResourceError(f"no suite task {m['name']!r} (list_tasks shows them)")
        task = load_task(m["name"])
        path = task.baseline_file if m["file"] == "baseline.py" else task.reference_kernel
        if path is None:
            raise ResourceError(f"task {m['name']} ships no reference kernel")
        return path.read_text(), "text/x-python"
    raise ResourceError(f"unknown resource {uri!r}: {CHIPS_URI}, {CHEAT_SHEET_URI}, "
                        "maxkernel://tasks/{name}/baseline.py or maxkernel://tasks/{name}/kernel.py")


PROMPT_NAME = "optimise_task"
PROMPT_ARGS = (("task", "A suite task name (e.g. 12p_RMSNorm) or a task folder inside the workspace root", True),
               ("chip", "Target TPU chip: v4, v5e (default), v5p, v6e or 7x", False))


def prompt(task: str, chip: str = "v5e") -> str:
    """The instructions that walk a client agent through plan, write, compile, test and evaluate with our tools."""
    chip = chip or "v5e"
    return f"""Write a JAX Pallas TPU kernel for the maxkernel task {task!r} that is correct and faster than its XLA \
baseline on {chip}. Use only maxkernel's tools; the harness's verdict is the only word on correctness and speed.

Pass task={task!r} and chip={chip!r} to every tool that takes them; files are relative to the workspace root.

1. Understand: call task_info (the reference code, input shapes and dtypes, tolerance, FLOPs) and read the resource \
maxkernel://pallas/cheat-sheet; read_example shows the closest real kernels, chip_specs the chip's VMEM and peaks.
2. Plan: choose the grid, the BlockSpecs (block shapes aligned to the chip's tiles: last two dims multiples of \
(8, 128) for f32), what stays in VMEM, and the accumulation dtype. Check names with pallas_api before using them.
3. Write: write_file kernel.py defining workload(*inputs) with the same signature and outputs as the baseline's \
workload, computing the work inside pl.pallas_call (not with jnp outside it: the harness measures what runs in Pallas).
4. Compile: compile_kernel for {chip}. On an error, read its hint, fix, compile again.
5. Test: test_kernel runs the strict interpreter over several seeds (races, out-of-bounds reads, NaN scratch). Fix \
every mismatch it names before going on.
6. Evaluate: evaluate_kernel gives the verdict (status correct / incorrect / rejected, speedup, flags). Only a \
"correct" status counts; off a TPU the speedup is interpreter time and the estimate (estimate_kernel) is what \
predicts TPU speed.
7. Improve: if it is correct, try larger blocks or tune_kernel over the kernel's TUNABLES, and evaluate again; \
keep the fastest correct version.

Report the final verdict as evaluate_kernel returned it."""
