"""An ADK plugin that keeps tool failures inside the conversation: a tool never raises into the runner.

A tool that raises, a call to a tool that does not exist, missing or mistyped arguments: each comes back to the
model as {status: "error", message, hint} it can act on, and is counted in state['faults']. An argument read
leniently (chip "TPU v5e" as v5e) is counted too, so a run shows how sloppy its model was.
"""

from __future__ import annotations

import logging

from google.adk.plugins.base_plugin import BasePlugin

from maxkernel import chips
from maxkernel.agents.usage import record_fault
from maxkernel.tools.errors import tool_error

__all__ = ["ToolGuardPlugin"]

_log = logging.getLogger("maxkernel.guard")


def _classify(message: str, result: dict) -> str:
    if result.get("error_kind") and result["error_kind"] != "bad_argument":
        return result["error_kind"]
    text = message.lower()
    if "no tool with that name" in text:
        return "unknown_tool"
    if "mandatory input parameters are not present" in text or "validation" in text or "must be" in text:
        return "malformed_tool_call"
    if "unknown chip" in text:
        return "unknown_chip"
    return result.get("error_kind") or "tool_error"


class ToolGuardPlugin(BasePlugin):
    def __init__(self):
        super().__init__(name="maxkernel_tool_guard")
        self._answered: set[str] = set()  # calls whose error this plugin already answered and counted

    async def before_tool_callback(self, *, tool, tool_args, tool_context):
        chip = tool_args.get("chip") if isinstance(tool_args, dict) else None
        if isinstance(chip, str) and chip.strip():
            canonical = chips.canonical_name(chip)
            if canonical and canonical != chip:
                record_fault(tool_context.state, "sloppy_chip", f"read {chip!r} as {canonical}", role=tool_context.agent_name,
                             tool=tool.name)
        return None

    async def on_tool_error_callback(self, *, tool, tool_args, tool_context, error):
        name = getattr(tool, "name", "?")
        if getattr(tool, "description", "") == "Tool not found":  # ADK's stand-in for a name the model made up
            kind, hint = "unknown_tool", "call only the tools listed in your instructions"
        else:
            kind, hint = "tool_crashed", "check the arguments; if it happens again, carry on without this tool"
        _log.warning("tool %s raised %s: %s", name, type(error).__name__, error)
        detail = str(error).split("\n\n")[0]  # ADK's unknown-tool text: the name and the tools there are
        result = tool_error(f"{name} failed: {type(error).__name__}: {detail}", hint, kind=kind)
        record_fault(tool_context.state, kind, "error result returned to the model", role=tool_context.agent_name,
                     tool=name, message=result["message"][:200])
        if tool_context.function_call_id:
            self._answered.add(tool_context.function_call_id)
        return result

    async def after_tool_callback(self, *, tool, tool_args, tool_context, result):
        if not isinstance(result, dict) or tool_context.function_call_id in self._answered:
            self._answered.discard(tool_context.function_call_id)
            return None
        if getattr(tool_context, "tool_confirmation", None) is not None:
            return None  # a person's answer to a confirmation (e.g. a rejected plan): not a fault, left as ADK says
        if result.get("status") == "error":
            message = result.get("message", "")
            structured = result
        elif isinstance(result.get("error"), str) and not result.get("ok", False):
            # ADK's own replies (missing arguments, mistyped arguments, unknown tool) and older tools' {"error"}.
            message = result["error"]
            kind = _classify(message, result)
            hint = {"unknown_tool": "call only the tools listed in your instructions",
                    "malformed_tool_call": "call it again with every required argument, spelled as declared"}.get(
                kind, "read the message, fix the arguments and call again")
            # The original "error" text stays beside the structured fields, for callers that read it.
            structured = {**tool_error(message, hint, kind=kind), **result}
        else:
            return None
        kind = _classify(structured.get("message", message), structured)
        if kind in ("missing_file",):
            return structured if structured is not result else None  # an ordinary answer, not a fault
        record_fault(tool_context.state, kind, "error result returned to the model", role=tool_context.agent_name,
                     tool=tool.name, message=str(structured.get("message", ""))[:200])
        return structured if structured is not result else None
