"""`maxkernel port`: GPU code to a JAX reference the harness proves equivalent to the original, then a task folder,
then (with optimize) the autonomous loop's Pallas kernel for it; through the real ADK Runner."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Callable

__all__ = ["PortError", "run_port"]


class PortError(ValueError):
    """A usage problem found before any work: a bad spec, no credentials, no recording for the replay model."""


def _agent_port(spec, raw: dict, model: str | None, progress) -> tuple[dict, dict]:
    """The porter's rounds through the Runner; (the port result from state, usage)."""
    from google.adk import Runner
    from google.genai import types

    from maxkernel.agents import build_app
    from maxkernel.agents.models import ModelConfigError, check_credentials, is_replay, model_name
    from maxkernel.agents.replay.model import recorded_tasks
    from maxkernel.agents.services import artifact_service, session_service
    from maxkernel.optimize import USER_ID, _describe
    from maxkernel.settings import get_settings

    name = model_name("porter", override=model)
    try:
        check_credentials(name)
    except ModelConfigError as exc:
        raise PortError(str(exc)) from None
    key = f"port_{spec.source.stem}"
    if is_replay(name) and key not in recorded_tasks():
        raise PortError(f"the replay model has port recordings only for "
                        f"{', '.join(t[5:] for t in recorded_tasks() if t.startswith('port_')) or 'none'}; use --jax "
                        "FILE.py:FN to check a port you wrote, or a gemini model")
    progress(f"model: {name}")

    async def go() -> dict:
        app = build_app("port", model)
        sessions = session_service(None)
        runner = Runner(app=app, session_service=sessions, artifact_service=artifact_service(None))
        try:
            session = await sessions.create_session(app_name=app.name, user_id=USER_ID, state={"port": raw})
            ws = get_settings().data_dir / "workspaces" / session.id
            message = types.Content(role="user", parts=[types.Part(text=f"port {spec.source}:{spec.name}")])
            async for event in runner.run_async(user_id=USER_ID, session_id=session.id, new_message=message,
                                                state_delta={"workspace": str(ws)}):
                for line in _describe(event):
                    progress(line)
            session = await sessions.get_session(app_name=app.name, user_id=USER_ID, session_id=session.id)
            return dict(session.state)
        finally:
            await runner.close()

    state = asyncio.run(go())
    return dict(state.get("port_result") or state.get("port_report") or {}), dict(state.get("usage") or {})


def run_port(source: str, args: list[str], *, kind: str | None = None, gens: list[str] | None = None,
             init: list[str] | None = None, dims: list[str] | None = None, static: list[str] | None = None,
             smoke: list[str] | None = None, oracle: str | None = None, jax: str | None = None,
             out: str | Path | None = None, force: bool = False, model: str | None = None, seeds: int = 3,
             backward: bool = False, optimize: bool = False, progress: Callable[[str], None] | None = None) -> dict:
    """Port, prove, make the task, optionally optimise; returns the cli.md `port` document. PortError before any
    work for usage problems."""
    from maxkernel.port import SpecError, build_spec, check_port
    from maxkernel.port.folder import make_folder

    progress = progress or (lambda _line: None)
    try:
        spec = build_spec(source, list(args), kind=kind, gens=gens, init=init, dims=dims, static=static, smoke=smoke,
                          oracle=oracle)
    except SpecError as exc:
        raise PortError(str(exc)) from None
    # What the session's state keeps: absolute paths, so the porter's tools rebuild the same spec anywhere.
    raw = {"source": f"{spec.source.resolve()}:{spec.name}", "file": str(spec.source.resolve()), "name": spec.name,
           "kind": spec.kind, "args": list(args), "gens": list(gens or []), "init": list(init or []),
           "dims": list(dims or []), "static": list(static or []), "smoke": list(smoke or []),
           "oracle": f"{spec.oracle[0].resolve()}:{spec.oracle[1]}" if spec.oracle else None, "backward": backward, "seeds": seeds}
    if out is not None:
        o = Path(out)
        if o.exists() and (not o.is_dir() or any(o.iterdir())):
            if not force:
                raise PortError(f"--out {o} exists and is not empty (pass --force to replace it)")
            if not (o / "baseline.py").is_file():  # checked before the port runs, not after
                raise PortError(f"--out {o} is not a task folder (no baseline.py): --force only replaces task folders")
    if optimize and out is None:
        raise PortError("--optimize needs --out DIR (the task folder the loop optimises)")
    if optimize:  # the loop's model is checked now, not after the port's work
        from maxkernel.optimize import OptimizeError, check_models

        try:
            check_models(str(out), model)
        except OptimizeError as exc:
            raise PortError(str(exc)) from None
    doc: dict = {"source": str(spec.source), "name": spec.name, "kind": spec.kind, "agent": jax is None}
    if jax:
        where, sep, fn = jax.rpartition(":")
        if not sep or not where.endswith(".py") or not fn.isidentifier():
            raise PortError(f"--jax {jax!r}: write FILE.py:FUNCTION")
        if not Path(where).is_file():
            raise PortError(f"--jax {jax!r}: no file {where}")
        port_file, function = Path(where), fn
        report = check_port(spec, port_file, function, seeds=seeds, backward=backward, progress=lambda m: progress(f"  {m}")).model_dump()
    else:
        report, usage = _agent_port(spec, raw, model, progress)
        doc["usage"] = usage
        port_file = Path(report["port_file"]) if report.get("port_file") else None
        function = report.get("function")
    doc["port"] = report
    doc["equivalent"] = bool(report.get("equivalent"))
    doc["port_file"] = str(port_file) if port_file and doc["equivalent"] else None
    doc["task"] = None
    if doc["equivalent"] and out is not None:
        from maxkernel.port.check import PortReport

        progress(f"making the task folder {out}")
        try:
            task = make_folder(spec, PortReport(**report), port_file, function, out, force=force,
                               progress=lambda m: progress(f"  {m}"))
        except SpecError as exc:
            raise PortError(str(exc)) from None
        doc["task"] = task.model_dump()
        if task.ok and port_file is not None:
            shutil.copyfile(port_file, Path(out) / "port" / "jax_port.py")
    doc["optimize"] = None
    if optimize and doc["task"] and doc["task"]["ok"]:
        from maxkernel.optimize import OptimizeError, run_optimize

        progress("optimising the ported task's Pallas kernel")
        try:
            # The kernel lands in the task folder (kernel.py beside baseline.py, with its verdict.json).
            doc["optimize"] = run_optimize(str(Path(out).resolve()), model=model, out=out, progress=progress)
        except OptimizeError as exc:  # the port and its task stand; say why the loop did not start
            doc["optimize"] = {"status": "error", "error": str(exc), "verdict": None}
    doc["summary"] = report.get("summary", "") + (
        f"; task {doc['task']['path']}" if doc["task"] and doc["task"]["ok"] else
        (f"; task refused: {doc['task']['reason']}" if doc["task"] else "")) + _optimize_clause(doc["optimize"])
    return doc


def _optimize_clause(opt: dict | None) -> str:
    """The loop's part of the port's summary: the Pallas kernel's path, held-out verdict and TPU estimate (the
    optimize command's own summary line), or why the loop did not start."""
    if not opt:
        return ""
    if opt.get("error"):
        return f"; Pallas kernel: ERROR ({opt['error']})"
    from maxkernel.optimize import summary_line

    return f"; Pallas kernel: {opt.get('summary') or summary_line(opt)}"
