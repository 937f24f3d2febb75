"""Sandbox job: `maxkernel task new`'s build over a function a process may not import (the MCP server's make_task,
a port's task): the task is validated and written in the job's scratch folder (out/NAME/); tasknew/sandboxed.py
takes its regular files back."""

from __future__ import annotations

from pathlib import Path

__all__ = ["run"]


def run(job: dict, scratch: Path) -> dict:
    from maxkernel.tasknew.build import build_task
    from maxkernel.tasknew.specs import SpecError

    out = scratch / "out" / job["name"]
    try:
        report = build_task(job["function"], list(job["args"]), out, gens=job.get("gens") or [],
                            static=job.get("static") or [], smoke=job.get("smoke") or [], flops=job.get("flops"),
                            name=job["name"], configs=job.get("configs") or [])
    except SpecError as exc:
        return {"status": "ok", "spec_error": str(exc)}
    files = sorted(p.name for p in out.iterdir() if p.is_file()) if report.ok else []
    return {"status": "ok", "report": report.model_dump(), "files": files}


