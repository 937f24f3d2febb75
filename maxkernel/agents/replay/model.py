"""ReplayLlm: a BaseLlm that answers from recorded turns (sub-agents) or a fixed routing script (HITL root).

It decides from the request alone (the role it was built for, the Task/Iteration/Debug round lines of the
instruction, the last part of the conversation), so one process can serve many sessions. Everything it says
starts with "[replay]"; tool calls it makes run for real.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from functools import lru_cache
from importlib import resources
from typing import AsyncGenerator

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

__all__ = ["ReplayLlm", "StaleRecording", "recorded_tasks", "loop_tasks", "port_sources", "scope", "shipped_kernel",
           "LABEL", "field"]

LABEL = "[replay]"


@lru_cache(maxsize=None)
def _recording(task: str) -> dict | None:
    path = resources.files(__package__) / f"{task}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def recorded_tasks() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__package__).iterdir() if p.name.endswith(".json"))


def loop_tasks() -> list[str]:
    """The tasks the optimisation loop can be replayed on: recordings with an implementer turn (a task folder
    matches by its name)."""
    return [t for t in recorded_tasks() if any(turn["role"] == "implementer" for turn in _recording(t)["turns"])]


def port_sources() -> list[str]:
    """The source files (by stem) whose port the replay model has recorded (recording port_<stem>)."""
    return [t[len("port_"):] for t in recorded_tasks()
            if t.startswith("port_") and any(turn["role"] == "porter" for turn in _recording(t)["turns"])]


def scope() -> str:
    """What the replay model can do, in one clause, for a refusal that says so up front."""
    suite = [t for t in loop_tasks() if not t.startswith("port_")]
    folders = [t for t in loop_tasks() if t.startswith("port_")]  # the folders `port --out` makes of those ports
    where = ", ".join(suite) + (f" or a task folder named {', '.join(folders)}" if folders else "")
    return (f"optimize on {where}, and port of {', '.join(f'{p}.py' for p in port_sources())} "
            "(recorded model turns; the tools, sandbox and verdicts are real)")


def field(text: str, name: str) -> str:
    """The value of a "Name: value" line of an instruction."""
    m = re.search(rf"^{name}:[ \t]*(\S*)", text or "", re.M)
    return m.group(1) if m else ""


def _text(t: str) -> types.Content:
    return types.Content(role="model", parts=[types.Part(text=f"{LABEL} {t}")])


def _calls(calls: list[dict]) -> types.Content:
    return types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name=c["name"], args=c["args"]))
                                              for c in calls])


class ReplayLlm(BaseLlm):
    """Offline model for tests and demos; `role` is the agent it answers for."""

    model: str = "replay"
    role: str = ""

    @classmethod
    def supported_models(cls) -> list[str]:
        return ["replay"]

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        instruction = str(llm_request.config.system_instruction or "") if llm_request.config else ""
        last = llm_request.contents[-1] if llm_request.contents else None
        parts = list(last.parts or []) if last else []
        responses = [p.function_response for p in parts if p.function_response]
        if self.role == "root":
            content = self._route(llm_request, parts, responses)
        else:
            content = self._turn(instruction, responses)
        yield self._response(llm_request, content)

    @staticmethod
    def _response(llm_request: LlmRequest, content: types.Content, **meta) -> LlmResponse:
        """The answer with a token count a real endpoint would bill: ~4 characters a token over the whole prompt
        (system instruction, conversation, tool declarations) and the answer."""
        config = llm_request.config
        prompt = str(config.system_instruction or "") if config else ""
        prompt += "".join(str(c) for c in llm_request.contents)
        prompt += "".join(str(t) for t in (config.tools or [])) if config else ""
        n_in, n_out = len(prompt) // 4, len(str(content)) // 4
        return LlmResponse(content=content, custom_metadata=meta or None,
                           usage_metadata=types.GenerateContentResponseUsageMetadata(
                               prompt_token_count=n_in, candidates_token_count=n_out, total_token_count=n_in + n_out))

    # -- sub-agents: recorded turns ------------------------------------------------------------------------
    def _turn(self, instruction: str, responses) -> types.Content:
        task = field(instruction, "Task")
        iteration = int(field(instruction, "Iteration") or 1)
        debug_round = int(field(instruction, "Debug round") or 0)
        rec = _recording(task) or _recording(task.rstrip("/").split("/")[-1])
        turn = self._find(rec, iteration, debug_round) if rec else None
        if responses:  # our tool calls came back: end the turn with the recorded note
            if turn and turn.get("after"):
                return _text(turn["after"])
            return _text(f"{self.role} step done: " + "; ".join(_short(r) for r in responses))
        if turn is None:
            return _text(f"no recorded {self.role} turn for {task or 'this task'} at iteration {iteration}, "
                         f"debug round {debug_round}; nothing to do")
        if "calls" in turn:
            try:
                return _calls([_expand(c, rec) for c in turn["calls"]])
            except StaleRecording as exc:
                return _text(f"{exc}; nothing to do")
        return _text(turn["text"])

    def _find(self, rec: dict, iteration: int, debug_round: int) -> dict | None:
        candidates = [t for t in rec["turns"] if t["role"] == self.role]
        for t in candidates:  # exact match first, then the role's last turn at or before this iteration
            if t.get("iteration", 1) == iteration and t.get("debug_round", 0) == debug_round:
                return t
        fallback = [t for t in candidates if t.get("iteration", 1) <= iteration and t.get("debug_round", 0) == debug_round]
        return fallback[-1] if fallback else None

    # -- the HITL root: a fixed routing script -------------------------------------------------------------
    def _route(self, llm_request: LlmRequest, parts, responses) -> types.Content:
        if not responses:
            text = " ".join(p.text for p in parts if p.text)
            draft = re.search(r"\bdraft (kernel|plan)\s+(\S+)", text, re.I)
            if draft:
                return _calls([{"name": "use_draft", "args": {"path": draft.group(2), "kind": draft.group(1).lower()}}])
            made = re.search(r"\btask (?:of|from)\s+(\S+:\w+)", text, re.I)
            if made:
                specs = re.findall(r"\b(\w+\[[^\]]*\])", text)
                statics = re.findall(r"\b(\w+=[^\s,\[\]]+)(?![^\[]*\])", text)
                return _calls([{"name": "make_task", "args": {"function": made.group(1), "args": specs,
                                                              "static": statics}}])
            port = re.search(r"\bport\s+(\S+\.py(?::\w+)?)", text, re.I)
            if port:
                named = {k: re.findall(rf"\b{k}\s+(\w+=[^\s,]+)", text) for k in ("init", "dim", "static")}
                return _calls([{"name": "start_port", "args": {
                    "source": port.group(1), "args": re.findall(r"\b(\w+\[[^\]]*\])", text), "init": named["init"],
                    "dims": named["dim"], "static": named["static"]}}])
            if re.search(r"\bport again\b", text, re.I):
                return _calls([{"name": "porter", "args": {"request": "Fix the port: the check failed."}}])
            folder = next((w for w in text.split() if (Path(w) / "baseline.py").is_file()), None)
            if folder:
                return _calls([{"name": "select_task", "args": {"task": folder, "size": "smoke"}}])
            m = re.search(r"\b(\d{1,2}[pk]_[A-Za-z0-9_]+|rw_[a-z0-9_]+)\b", text)
            if m:
                return _calls([{"name": "select_task", "args": {"task": m.group(1), "size": "smoke"}}])
            if re.search(r"\b(debug|fix)\b", text, re.I):
                return _calls([{"name": "debugger", "args": {"request": text}}])
            if re.search(r"\b(plan|again|re-?plan)\b", text, re.I):
                return _calls([{"name": "planner", "args": {"request": text}}])
            return _text("Tell me the task to work on, e.g. 'optimize 12p_RMSNorm'.")
        r = responses[-1]
        body = dict(r.response or {})
        if r.name == "select_task":
            if "error" in body:
                return _text(f"I could not select that task: {body['error']}")
            return _calls([{"name": "planner", "args": {"request": "Plan the first kernel version for this task."}}])
        if r.name == "use_draft":
            if "error" in body:
                return _text(f"I could not use that draft: {body['error']}")
            if body.get("kind") == "plan":
                return _calls([{"name": "submit_plan", "args": {}}])
            return _calls([{"name": "judge_kernel", "args": {}}])
        if r.name == "make_task":
            if body.get("ok"):
                return _text(f"{body.get('summary')}\nShall I work on it? Say 'optimize {body.get('path')}'.")
            return _text(f"I could not make that task: {body.get('reason') or body.get('error')}")
        if r.name == "start_port":
            if not body.get("ok"):
                return _text(f"I could not start that port: {body.get('summary') or body.get('message') or body.get('error')}")
            return _calls([{"name": "porter", "args": {"request": "Port the operator to jax_port.py."}}])
        if r.name == "porter":
            return _calls([{"name": "adopt_port", "args": {}}])
        if r.name == "adopt_port":
            if body.get("ok"):
                return _text(f"{body.get('summary')}\nShall I work on it? Say 'optimize {body.get('path')}'.")
            return _text(f"The port is not equivalent yet: {body.get('summary') or body.get('message')}. "
                         "Say 'port again' to hand it back to the porter with where it differs.")
        if r.name == "planner":
            return _calls([{"name": "submit_plan", "args": {"plan": str(body.get("result", ""))[:4000]}}])
        if r.name == "submit_plan":
            if body.get("approved"):
                return _calls([{"name": "implementer", "args": {"request": "Implement the approved plan."}}])
            return _text("The plan was not approved. What should change? Say 'plan again' with your wishes.")
        if r.name in ("implementer", "debugger"):
            return _calls([{"name": "judge_kernel", "args": {}}])
        if r.name == "judge_kernel":
            verdict = f"Harness verdict: {body.get('summary', body)}."
            if body.get("status") == "correct":
                return _text(f"{verdict} Next: profile, tune, re-plan or ask me.")
            return _text(f"{verdict} Say 'debug' to hand it to the debugger, or re-plan.")
        return _text(f"{r.name} finished: {_short(r)}")


def _short(response) -> str:
    body = response.response or {}
    s = body.get("summary") or body.get("result") or body.get("error") or ""
    return f"{response.name}: {str(s)[:200]}"


class StaleRecording(ValueError):
    """A recording that replays the task's shipped kernel, which has changed since it was recorded."""


def shipped_kernel(rec: dict) -> str:
    """The task's shipped kernel.py, the fixed version a recording made "content_kernel" replays; its sha256 must
    be the one the recording pins (a changed kernel is not the attempt that was recorded)."""
    import hashlib

    import jaxbench

    data = (jaxbench.task_dir(rec["task"]) / "kernel.py").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    if sha != rec.get("kernel_sha256"):
        raise StaleRecording(f"the recording of {rec['task']} replays its kernel.py with sha256 "
                             f"{str(rec.get('kernel_sha256'))[:12]}, but the shipped one is {sha[:12]}: record it again")
    return data.decode()


def _expand(call: dict, rec: dict | None = None) -> dict:
    """A recorded call whose file content is kept beside the recording ("content_file"), or is the task's shipped
    kernel ("content_kernel", with the recorded first attempt's "edits" made to it), gets it inlined."""
    args = dict(call["args"])
    if "content_file" in args:
        args["content"] = (resources.files(__package__) / "kernels" / args.pop("content_file")).read_text()
    elif args.pop("content_kernel", False):
        text = shipped_kernel(rec or {})
        for old, new in args.pop("edits", []):
            if text.count(old) != 1:
                raise StaleRecording(f"an edit of the recording of {rec['task']} matches its kernel.py "
                                     f"{text.count(old)} times: {old[:60]!r}")
            text = text.replace(old, new)
        args["content"] = text
    return {"name": call["name"], "args": args}
