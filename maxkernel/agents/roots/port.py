"""The porting policy: the porter writes a pure-JAX reference of a GPU operator, the harness checks it against
the original after every round (the agent's own word is never the verdict), and a failed check goes back to the
porter with where the port and the original disagree, for a bounded number of rounds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import AsyncGenerator

from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event

from maxkernel.agents.roots._common import one_line, save_text_artifact, say
from maxkernel.settings import get_settings

__all__ = ["PortOrchestrator", "PORT_ROUNDS"]

PORT_ROUNDS = 3


class PortOrchestrator(BaseAgent):
    """Routes over the pool's porter; see the module docstring. State "port" (the command's arguments) is set
    when the session is created."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        from maxkernel.port import check_port
        from maxkernel.port.check import describe, feedback_text
        from maxkernel.tools.port_tools import PORT_FILE, entry_function, spec_from_state

        state = ctx.session.state
        port = state.get("port")
        if not port:
            yield say(ctx, self.name, "Nothing to port: run `maxkernel port --from FILE.py ...`.")
            return
        porter = next(a for a in self.sub_agents if a.name == "porter")
        ws = Path(state.get("workspace") or get_settings().data_dir / "workspaces" / ctx.session.id)
        ws.mkdir(parents=True, exist_ok=True)
        spec = spec_from_state(port)
        info = await asyncio.to_thread(describe, spec)
        if info.get("status") != "ok":
            report = {"ok": False, "equivalent": False, "summary": f"the original could not be loaded: {info.get('error')}",
                      "error": info.get("error")}
            yield say(ctx, self.name, report["summary"], {"port_report": report, "port_result": report})
            return
        yield say(ctx, self.name, f"Porting {port['name']} ({info['kind']}) from {Path(port.get('file', port['source'])).name}; every "
                                  "port is checked against the original in the sandbox.",
                  {"workspace": str(ws), "port_params": info.get("params", []), "port_feedback": "",
                   "debug_round": 0})
        report: dict = {}
        name = None
        for rnd in range(PORT_ROUNDS):
            yield say(ctx, self.name, "", {"debug_round": rnd})
            try:
                async for ev in porter.run_async(ctx):
                    yield ev
            except Exception as exc:  # noqa: BLE001 - a model that gave up: the round counts as failed
                yield say(ctx, self.name, f"porter round {rnd + 1} failed: {one_line(str(exc), 200)}")
                continue
            target = ws / PORT_FILE
            name = entry_function(target) if target.is_file() else None
            if not name:
                report = {"ok": True, "equivalent": False, "summary": f"round {rnd + 1}: no usable {PORT_FILE} "
                          "(missing, unparseable, or without a public function)"}
            else:
                r = await asyncio.to_thread(check_port, spec, target, name, seeds=int(port.get("seeds") or 3),
                                            backward=bool(port.get("backward")))
                report = r.model_dump()
                await save_text_artifact(ctx, f"{PORT_FILE}.round{rnd + 1}", target.read_text(errors="replace"))
            yield say(ctx, self.name, f"Harness check, round {rnd + 1}: {report['summary']}",
                      {"port_report": report, "port_feedback": "" if report.get("equivalent") else feedback_text(report)})
            if report.get("equivalent"):
                break
        result = {**report, "port_file": str(ws / PORT_FILE) if report.get("equivalent") else None,
                  "function": name if report.get("equivalent") else None, "rounds": rnd + 1}
        yield say(ctx, self.name, "", {"port_result": result})
