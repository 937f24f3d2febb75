"""Sandbox job: `estimate --program`'s task folder made where the program's code may not be imported (the MCP
server): --inputs evaluated abstractly, the function traced and counted, the folder written in the job's scratch
(out/KEY/NAME/); tasknew/program_sandboxed.py takes its regular files back."""

from __future__ import annotations

from pathlib import Path

__all__ = ["run"]


def run(job: dict, scratch: Path) -> dict:
    from maxkernel.tasknew.program import inputs_and_parallel, program_task, refuse_axes_without_inputs
    from maxkernel.tasknew.specs import SpecError

    try:
        args, parallel = list(job["args"]), list(job.get("parallel") or [])
        if job.get("inputs"):
            args, parallel = inputs_and_parallel(job["inputs"], parallel)
        else:
            refuse_axes_without_inputs(parallel)
        task, notes = program_task(job["function"], args, scratch / "out", gens=job.get("gens") or [],
                                   static=job.get("static") or [], parallel=parallel,
                                   flops=job.get("flops"), key=job["key"])
    except SpecError as exc:
        return {"status": "ok", "spec_error": str(exc)}
    files = sorted(p.name for p in task.path.iterdir() if p.is_file())
    return {"status": "ok", "folder": task.path.relative_to(scratch).as_posix(), "files": files, "notes": notes,
            "args": args}
