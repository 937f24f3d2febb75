"""FaultyLlm (`--model faulty`): the replay model with the faults a real endpoint and a sloppy model produce.

Deterministic by seed, each fault fires once per process at a fixed place of an otherwise good replay:

- model-call faults, raised from the call like google-genai raises them: an HTTP 429 (with a RetryInfo delay),
  an HTTP 503, and a hang past the call timeout (`timeout`);
- a prose answer where the implementer should call write_file (`prose_answer`), and a kernel file cut in half
  (`truncated_file`), one in each of the first two iterations;
- in the first debug round: write_file without its content argument (`malformed_tool_call`), then, after the
  real fix, compile_kernel with a chip that does not exist (`unknown_chip`) and with one written sloppily
  ("TPU v5e", `sloppy_chip`).

What fired rides on the next answer's custom_metadata["maxkernel_injected"], so a run can report every
injected fault beside how it was handled.
"""

from __future__ import annotations

import asyncio
import random
from typing import AsyncGenerator

from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import errors, types
from pydantic import PrivateAttr

from maxkernel.agents.replay.model import ReplayLlm, StaleRecording, _calls, _expand, _recording, _text, field

__all__ = ["FaultyLlm", "INJECTED_KEY", "FAULT_KINDS"]

INJECTED_KEY = "maxkernel_injected"
FAULT_KINDS = ("http_429", "http_503", "timeout", "prose_answer", "truncated_file", "malformed_tool_call",
               "unknown_chip", "sloppy_chip")
_CALL_FAULTS = ("http_429", "http_503", "timeout")


def _plan(seed: int) -> dict[tuple[str, int, int], list[str]]:
    """(role, iteration, debug round) -> the faults injected at that turn."""
    rng = random.Random(seed)
    plan: dict[tuple[str, int, int], list[str]] = {}
    for kind, role in zip(_CALL_FAULTS, rng.sample(["planner", "implementer", "profiler", "autotuner"], 3)):
        plan.setdefault((role, 1, 0), []).append(kind)
    first, second = rng.sample(["prose_answer", "truncated_file"], 2)
    plan.setdefault(("implementer", 1, 0), []).append(first)
    plan.setdefault(("implementer", 2, 0), []).append(second)
    plan[("debugger", 1, 1)] = ["malformed_tool_call", "unknown_chip", "sloppy_chip"]
    return plan


def _is_error(body: dict) -> bool:
    return "error" in body or body.get("status") == "error" or body.get("ok") is False


class FaultyLlm(ReplayLlm):
    """Offline model for fault tests and demos; see the module docstring."""

    model: str = "faulty"
    seed: int = 0
    call_timeout_s: float = 3.0  # the wrapper's per-call limit for this model; the hang outlasts it
    _fired: set = PrivateAttr(default_factory=set)
    _pending: list = PrivateAttr(default_factory=list)

    @classmethod
    def supported_models(cls) -> list[str]:
        return ["faulty"]

    def _fire(self, kind: str, site: tuple) -> bool:
        key = (kind, site)
        if key in self._fired:
            return False
        self._fired.add(key)
        self._pending.append({"kind": kind, "role": self.role, "iteration": site[1], "debug_round": site[2]})
        return True

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        instruction = str(llm_request.config.system_instruction or "") if llm_request.config else ""
        site = (field(instruction, "Task"), int(field(instruction, "Iteration") or 1),
                int(field(instruction, "Debug round") or 0))
        kinds = _plan(self.seed).get((self.role, site[1], site[2]), []) if self.role != "root" else []
        last = llm_request.contents[-1] if llm_request.contents else None
        responses = [p.function_response for p in (last.parts or []) if p.function_response] if last else []
        if not responses:  # call faults hit the first call of a turn
            if "http_429" in kinds and self._fire("http_429", site):
                raise errors.ClientError(429, {"error": {
                    "code": 429, "status": "RESOURCE_EXHAUSTED", "message": "[faulty] injected: quota exceeded",
                    "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}]}})
            if "http_503" in kinds and self._fire("http_503", site):
                raise errors.ServerError(503, {"error": {"code": 503, "status": "UNAVAILABLE",
                                                         "message": "[faulty] injected: the model is overloaded"}})
            if "timeout" in kinds and self._fire("timeout", site):
                await asyncio.sleep(self.call_timeout_s * 20)  # cut off by the caller's timeout
        content = self._faulty_turn(site, kinds, responses)
        if content is None:
            content = self._turn(instruction, responses)
        injected, self._pending = self._pending, []
        yield self._response(llm_request, content, **({INJECTED_KEY: injected} if injected else {}))

    def _faulty_turn(self, site, kinds, responses) -> types.Content | None:
        rec = _recording(site[0]) or _recording(site[0].rstrip("/").split("/")[-1])
        turn = self._find(rec, site[1], site[2]) if rec else None
        try:
            writes = [_expand(c, rec) for c in (turn or {}).get("calls", []) if c["name"] == "write_file"]
        except StaleRecording:
            return None  # the plain replay turn says so
        if not writes:
            return None
        if not responses:
            if "prose_answer" in kinds and self._fire("prose_answer", site):
                return _text("Here is the kernel:\n```python\n" + writes[0]["args"]["content"] + "\n```")
            if "truncated_file" in kinds and self._fire("truncated_file", site):
                content = writes[0]["args"]["content"]
                return _calls([{"name": "write_file", "args": {"path": "kernel.py",
                                                               "content": content[: len(content) // 2]}}])
            if "malformed_tool_call" in kinds and self._fire("malformed_tool_call", site):
                return _calls([{"name": "write_file", "args": {"path": "kernel.py", "text": "(content missing)"}}])
            return None
        last = responses[-1]
        body = dict(last.response or {})
        if last.name == "write_file" and _is_error(body) and ("malformed_tool_call", site) in self._fired:
            return _calls(writes)  # the model reads the error and calls again, correctly
        if last.name == "write_file" and "unknown_chip" in kinds and self._fire("unknown_chip", site):
            return _calls([{"name": "compile_kernel", "args": {"chip": "tpu v9z"}}])
        if last.name == "compile_kernel" and "sloppy_chip" in kinds and self._fire("sloppy_chip", site):
            return _calls([{"name": "compile_kernel", "args": {"chip": "TPU v5e"}}])
        return None
