"""The HITL app over a real `adk api_server`'s REST API: plan approval, rejection, debugging, the verdict."""

from pathlib import Path

import pytest
from _servers import adk_server

# A correct kernel a person might hand in: the recording's fixed RMSNorm.
RMSNORM_DRAFT = Path(__file__).resolve().parents[2] / "maxkernel" / "agents" / "replay" / "kernels" / "12p_RMSNorm_v1_fixed.py"

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
    assert request["args"]["toolConfirmation"]["payload"] == {"version": 1}  # the approval names the version
    assert request["args"]["toolConfirmation"]["hint"].startswith("Approve plan v1?")
    assert any(request["id"] in (e.get("longRunningToolIds") or []) for e in ev)
    assert not chat.kernel().exists(), "no code may be written before the plan is approved"
    return request


def test_lists_both_apps(server):
    assert set(server.get("/list-apps")) >= {"auto", "hitl"}


def test_approved_plan_is_implemented_judged_and_debugged(server):
    chat = Chat(server)
    request = _ask_for_plan(chat)

    ev = chat.confirm(request, True)
    assert responses(ev, "submit_plan") == [{"approved": True, "version": 1}]
    assert calls(ev, "implementer") and calls(ev, "write_file")
    assert chat.kernel().is_file()
    (verdict,) = responses(ev, "judge_kernel")
    # The recording's first kernel is deliberately wrong (a row block of 100 breaks the (8,128) rule).
    assert verdict["status"] in {"incorrect", "error", "rejected"}, verdict
    assert "Harness verdict" in reply(ev) and verdict["summary"] in reply(ev)
    state = chat.state()
    assert state["plan_approved"] is True and state["approved_plan_version"] == 1 and state["debug_round"] == 1
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
    (refused,) = responses(ev, "submit_plan")
    assert refused["approved"] is False and refused["version"] == 1 and "rejected plan v1" in refused["message"]
    assert not calls(ev, "implementer") and not calls(ev, "write_file")
    assert not chat.kernel().exists()
    assert "What should change" in reply(ev)
    state = chat.state()
    assert state["plan_approved"] is False and state["approved_plan_version"] is None
    assert [v["status"] for v in state["plans"]] == ["rejected"]


def test_a_new_plan_needs_its_own_approval(server):
    """Planning again after an approval does not inherit it: the new plan is v2, pending, code stays gated."""
    chat = Chat(server)
    chat.confirm(_ask_for_plan(chat), True)
    written = chat.kernel().read_text()
    ev = chat.say("plan again, with bigger row blocks")
    assert calls(ev, "planner") and calls(ev, "submit_plan")
    (request,) = calls(ev, "adk_request_confirmation")
    assert request["args"]["toolConfirmation"]["payload"] == {"version": 2}
    state = chat.state()
    assert state["plan_approved"] is False and state["approved_plan_version"] == 1
    assert [v["status"] for v in state["plans"]] == ["approved", "pending"]
    ev = chat.send({"text": "debug it"})  # the debugger's write is refused until v2 is approved
    assert any("plan v1 was approved" in r.get("error", "") for r in responses(ev, "write_file")), ev
    assert chat.kernel().read_text() == written
    (request,) = calls(ev, "adk_request_confirmation") or [request]
    ev = chat.confirm(request, True)
    assert responses(ev, "submit_plan") == [{"approved": True, "version": 2}]
    assert chat.state()["approved_plan_version"] == 2 and chat.state()["plan_approved"] is True


def test_a_persons_draft_kernel_and_plan_are_used(server):
    chat = Chat(server)
    chat.say("optimize 12p_RMSNorm")
    draft = server.drafts_dir / "my_rmsnorm.py"
    draft.write_text(RMSNORM_DRAFT.read_text())
    ev = chat.say("use my draft kernel my_rmsnorm.py")
    (used,) = responses(ev, "use_draft")
    assert used["kind"] == "kernel" and used["static_check"] == "passes", used
    assert chat.kernel().read_text() == draft.read_text()
    (verdict,) = responses(ev, "judge_kernel")
    assert verdict["status"] == "correct", verdict

    (server.drafts_dir / "plan.md").write_text("Keep the draft; try a row block of 16.")
    ev = chat.say("here is my draft plan plan.md")
    assert responses(ev, "use_draft")[0]["version"] >= 1
    (request,) = calls(ev, "adk_request_confirmation")
    assert "row block of 16" in request["args"]["toolConfirmation"]["hint"]
    ev = chat.say("use my draft kernel ../../etc/passwd")
    assert "refused" in responses(ev, "use_draft")[0]["error"]


def test_sessions_persist_in_the_sqlite_store(server):
    chat = Chat(server)
    chat.say("hello")
    listed = server.get("/apps/hitl/users/u/sessions")
    assert chat.sid in {s["id"] for s in listed}
    assert (server.data_dir / "sessions.db").stat().st_size > 0


MY_OPS = '''
import jax
import jax.numpy as jnp


def gated_rms(x, gate, w, eps=1e-6):
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps) * w.astype(jnp.float32)
    return (y * jax.nn.silu(gate.astype(jnp.float32))).astype(x.dtype)


def constant(x):
    return jnp.ones_like(x)
'''


def test_a_persons_function_becomes_a_task_in_chat_and_is_worked_on_after_asking(server):
    chat = Chat(server)
    (server.drafts_dir / "my_ops.py").write_text(MY_OPS)
    ev = chat.say("make a task of my_ops.py:gated_rms with bf16[T=2048,H=1024] bf16[2048,1024] f32[1024] eps=1e-5")
    (call,) = calls(ev, "make_task")
    assert call["args"]["args"] == ["bf16[T=2048,H=1024]", "bf16[2048,1024]", "f32[1024]"]
    assert call["args"]["static"] == ["eps=1e-5"]
    (made,) = responses(ev, "make_task")
    assert made["ok"] is True, made
    assert Path(made["path"]).parent == (server.data_dir / "tasks").resolve()
    assert [c["name"] for c in made["checks"]][-1] == "output non-degenerate"
    assert "Shall I work on it?" in reply(ev) and not calls(ev, "select_task")  # it asks before running
    assert "task" not in chat.state() or not chat.state().get("task")

    ev = chat.say(f"optimize {made['path']}")
    assert responses(ev, "select_task")[0]["task"] == "gated_rms"
    assert chat.state()["task"] == made["path"] and calls(ev, "adk_request_confirmation")

    refused = Chat(server)
    ev = refused.say("make a task of my_ops.py:constant with f32[512,512]")
    (answer,) = responses(ev, "make_task")
    assert answer["ok"] is False and "degenerate" in answer["reason"]
    for outside in ("../../etc/hosts:f", "../../etc/ops.py:f"):
        ev = refused.say(f"make a task of {outside} with f32[8]")
        assert "refused" in responses(ev, "make_task")[0]["error"], outside


PORT_SOURCE = Path(__file__).resolve().parents[1] / "port" / "sources" / "rmsnorm_module.py"


def test_port_this_in_chat_checks_the_port_hands_back_the_mismatch_and_makes_a_task(server):
    from _extras import need_module

    need_module("torch", extra="port")
    chat = Chat(server)
    (server.drafts_dir / "rmsnorm_module.py").write_text(PORT_SOURCE.read_text())
    ev = chat.say("port rmsnorm_module.py:RMSNorm with bf16[T=4096,H=2048] init dim=H")
    (started,) = responses(ev, "start_port")
    assert started["ok"] and started["kind"] == "module" and started["params"][0]["name"] == "weight"
    assert calls(ev, "porter")
    # The recorded first port scales by (1 + weight): the harness's own check says where it differs.
    (first,) = responses(ev, "adopt_port")
    assert first["ok"] is False and first["mismatch"]["worst_index"], first
    assert "port again" in reply(ev) and "NOT EQUIVALENT" in reply(ev)
    assert "worst element" in chat.state()["port_feedback"]

    ev = chat.say("port again")
    (made,) = responses(ev, "adopt_port")
    assert made["ok"] is True, made
    assert Path(made["path"]).parent == (server.data_dir / "tasks").resolve()
    assert (Path(made["path"]) / "port" / "equivalence.json").is_file()
    assert "Shall I work on it?" in reply(ev) and not calls(ev, "select_task")

    outside = Chat(server)
    ev = outside.say("port ../../etc/ops.py:f with f32[8]")
    assert responses(ev, "start_port")[0]["status"] == "error"
