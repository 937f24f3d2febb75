"""A proven port becomes a task folder in the bring-your-own format (validated, smoke size, non-degenerate,
FLOPs), with the original and the equivalence report kept beside it under port/."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from maxkernel.port.check import PortReport, _spec_text, param_specs
from maxkernel.port.spec import PortSpec
from maxkernel.tasknew.build import TaskReport
from maxkernel.tasknew.sandboxed import build

__all__ = ["make_folder"]


def make_folder(spec: PortSpec, report: PortReport, port_file: str | Path, function: str, out: str | Path, *,
                force: bool = False, progress: Callable[[str], None] = lambda msg: None) -> TaskReport:
    """Only an equivalent port is made a task; the task's inputs are the operator's arguments then (a module's)
    parameters, drawn as the equivalence check drew them."""
    if not report.equivalent:
        raise ValueError("only a port the harness proved equivalent becomes a task")
    dtype = next((a.dtype for a in spec.arg_specs if a.is_float), "float32")
    params = param_specs(spec, report.params, dtype)
    args = [_spec_text(a, spec.config) for a in spec.arg_specs] + [_spec_text(a, spec.config) for _, a in params]
    gens = list(spec.gens) + [a.gen for _, a in params]
    static = [f"{k}={v!r}" for k, v in spec.static.items()]
    smoke = [f"{k}={v}" for k, v in spec.smoke.items()]
    out = Path(out)
    task = build(f"{port_file}:{function}", args, out, gens=gens, static=static, smoke=smoke, force=force,
                      name=out.name, progress=progress)
    if task.ok:
        keep = out / "port"
        keep.mkdir(exist_ok=True)
        shutil.copyfile(spec.source, keep / f"original_{spec.source.name}")
        if spec.oracle:
            shutil.copyfile(spec.oracle[0], keep / f"oracle_{spec.oracle[0].name}")
        (keep / "equivalence.json").write_text(json.dumps({"spec": spec.as_dict(), "report": report.model_dump()},
                                                          indent=2, default=str) + "\n")
    return task
