"""The HITL app over a real `adk api_server`'s REST API: plan approval, rejection, debugging, the verdict."""

from pathlib import Path

import pytest
from _servers import adk_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("hitl-http")
    with adk_server("api_server", data) as srv:
        yield srv


def _parts(events, key):
    return [p[key] for e in events for p in (e.get("content") or {}).get("parts", []) if key in p]


def calls(events, name):
    return [c for c in _parts(events, "functionCall") if c["name"] == name]


def responses(events, name):
    return [r["response"] for r in _parts(events, "functionResponse") if r["name"] == name]


def reply(events) -> str:
    return "\n".join(t for t in _parts(events, "text"))


class Chat:
    """One session of the hitl app, driven the way a client of the REST API drives it."""

    def __init__(self, server):
        self.server = server
        self.sid = server.post("/apps/hitl/users/u/sessions", {})["id"]

    def send(self, *parts):
        return self.server.post("/run", {"appName": "hitl", "userId": "u", "sessionId": self.sid,
                                         "newMessage": {"role": "user", "parts": list(parts)}})

    def say(self, text):
        return self.send({"text": text})

    def confirm(self, request, confirmed: bool):
        return self.send({"functionResponse": {"id": request["id"], "name": "adk_request_confirmation",
                                               "response": {"confirmed": confirmed}}})

    def state(self):
        return self.server.get(f"/apps/hitl/users/u/sessions/{self.sid}")["state"]

    def kernel(self) -> Path:
        return self.server.data_dir / "workspaces" / self.sid / "kernel.py"


def _ask_for_plan(chat):
    """Task chosen, plan written, and the run paused on the approval request."""
    ev = chat.say("optimize 12p_RMSNorm")
    assert responses(ev, "select_task") == [{"task": "12p_RMSNorm", "size": "smoke", "chip": "v5e"}]
    assert calls(ev, "planner") and calls(ev, "submit_plan")
    (request,) = calls(ev, "adk_request_confirmation")
    assert request["args"]["originalFunctionCall"]["name"] == "submit_plan"
    assert any(request["id"] in (e.get("longRunningToolIds") or []) for e in ev)
    assert not chat.kernel().exists(), "no code may be written before the plan is approved"
    return request


def test_lists_both_apps(server):
    assert set(server.get("/list-apps")) >= {"auto", "hitl"}


def test_approved_plan_is_implemented_judged_and_debugged(server):
    chat = Chat(server)
    request = _ask_for_plan(chat)

    ev = chat.confirm(request, True)
    assert responses(ev, "submit_plan") == [{"approved": True}]
    assert calls(ev, "implementer") and calls(ev, "write_file")
    assert chat.kernel().is_file()
    (verdict,) = responses(ev, "judge_kernel")
    # The recording's first kernel is deliberately wrong (a row block of 100 breaks the (8,128) rule).
    assert verdict["status"] in {"incorrect", "error", "rejected"}, verdict
    assert "Harness verdict" in reply(ev) and verdict["summary"] in reply(ev)
    state = chat.state()
    assert state["plan_approved"] is True and state["debug_round"] == 1
    assert state["last_error"].startswith("judge_kernel: ")

    first = chat.kernel().read_text()
    ev = chat.say("debug it")
    assert calls(ev, "debugger") and calls(ev, "write_file")
    assert chat.kernel().read_text() != first
    (verdict,) = responses(ev, "judge_kernel")
    assert verdict["status"] == "correct", verdict
    assert verdict["max_rel_err"] <= verdict["tolerance"]
    state = chat.state()
    assert state["verdict_summary"].startswith("CORRECT") and state["debug_round"] == 0
    assert state["usage"]["llm_calls"] > 0


def test_rejected_plan_writes_no_code_and_asks_what_to_change(server):
    chat = Chat(server)
    request = _ask_for_plan(chat)

    ev = chat.confirm(request, False)
    (refused,) = responses(ev, "submit_plan")  # ADK answers the paused call for the tool, which never ran
    assert "approved" not in refused and "rejected" in refused["error"], refused
    assert not calls(ev, "implementer") and not calls(ev, "write_file")
    assert not chat.kernel().exists()
    assert "What should change" in reply(ev)
    assert chat.state()["plan_approved"] is False


def test_sessions_persist_in_the_sqlite_store(server):
    chat = Chat(server)
    chat.say("hello")
    listed = server.get("/apps/hitl/users/u/sessions")
    assert chat.sid in {s["id"] for s in listed}
    assert (server.data_dir / "sessions.db").stat().st_size > 0
