"""The one shape of a tool's failure: a result the model can act on, never an exception into the runner."""

from __future__ import annotations

__all__ = ["tool_error"]


def tool_error(message: str, hint: str = "", kind: str = "bad_argument", **extra) -> dict:
    """{status: "error", message, hint} plus `error_kind` (bad_argument, missing_file, tool_crashed,
    unknown_tool) and the legacy ok/summary keys the loop and older callers read."""
    message = " ".join(str(message).split())[:2000] or "the tool failed"
    summary = message + (f" Hint: {hint}" if hint else "")
    return {"status": "error", "ok": False, "error_kind": kind, "message": message, "hint": hint, "summary": summary,
            **extra}

