"""The replay model's recordings: one per kernel family at least, each replaying the task's shipped kernel after a
first attempt the tools refused, and a recording whose kernel changed says so instead of replaying another one."""

import hashlib
import json
from importlib import resources

import pytest

import jaxbench
from maxkernel.agents.replay.model import StaleRecording, _expand, loop_tasks, recorded_tasks, shipped_kernel


REPLAY = resources.files("maxkernel.agents.replay")
FAMILIES = {"GEMM + epilogue", "norm", "attention", "paged/ragged attention", "MoE/grouped matmul", "scan/recurrence",
            "conv"}


def _rec(task: str) -> dict:
    return json.loads((REPLAY / f"{task}.json").read_text())


def _kernel_recordings() -> list[str]:
    return [t for t in recorded_tasks() if any(c["args"].get("content_kernel") for turn in _rec(t)["turns"]
                                               for c in turn.get("calls", []))]


@pytest.mark.unit
def test_the_suite_recordings_cover_every_kernel_family_across_both_suites():
    suite = [t for t in loop_tasks() if not t.startswith("port_")]
    families = {_rec(t).get("family") for t in suite}
    assert FAMILIES <= families, FAMILIES - families
    assert {jaxbench.suite_of(t) for t in suite} == {"jaxbench", "realworld"}


@pytest.mark.unit
@pytest.mark.parametrize("task", _kernel_recordings())
def test_a_recording_replays_the_shipped_kernel_after_a_refused_first_attempt(task):
    rec = _rec(task)
    shipped = (jaxbench.task_dir(task) / "kernel.py").read_text()
    assert rec["kernel_sha256"] == hashlib.sha256(shipped.encode()).hexdigest(), \
        "the shipped kernel changed: run scripts/record_attempt.py on this recording again"
    writes = {(t["role"], t.get("iteration", 1)): _expand(c, rec)["args"]["content"]
              for t in rec["turns"] for c in t.get("calls", []) if c["name"] == "write_file"}
    first, fixed = writes[("implementer", 1)], writes[("debugger", 1)]
    assert first != shipped and fixed == shipped and writes[("implementer", 2)] == shipped
    attempt = rec["attempt"]  # what the tools said of the first attempt, stored by scripts/record_attempt.py
    assert attempt["refused_by"].startswith(("compile", "tests")) and attempt["tool_said"] and attempt["mistake"]
    assert attempt["tool_said"].startswith(("FAIL", "FAILED", "configs")) or "rror" in attempt["tool_said"]


@pytest.mark.unit
def test_a_recording_whose_kernel_changed_is_refused_not_replayed():
    task = _kernel_recordings()[0]
    rec = {**_rec(task), "kernel_sha256": "0" * 64}
    call = {"name": "write_file", "args": {"path": "kernel.py", "content_kernel": True}}
    with pytest.raises(StaleRecording, match="record it again"):
        _expand(call, rec)
    with pytest.raises(StaleRecording, match="matches its kernel.py 0 times"):
        _expand({"name": "write_file", "args": {**call["args"], "edits": [["no such text", "x"]]}}, _rec(task))
    assert shipped_kernel(_rec(task)) == (jaxbench.task_dir(task) / "kernel.py").read_text()


@pytest.mark.unit
def test_the_replay_model_says_a_stale_recording_instead_of_writing_another_kernel(monkeypatch):
    import asyncio

    from google.adk.models.llm_request import LlmRequest
    from google.genai import types

    from maxkernel.agents.replay import model

    task = _kernel_recordings()[0]
    monkeypatch.setattr(model, "_recording", lambda name: {**_rec(task), "kernel_sha256": "0" * 64})
    request = LlmRequest(contents=[types.Content(role="user", parts=[types.Part(text="go")])],
                         config=types.GenerateContentConfig(system_instruction=f"Task: {task}\nIteration: 1\n"))

    async def answer():
        return [r async for r in model.ReplayLlm(role="implementer").generate_content_async(request)]

    (response,) = asyncio.run(answer())
    (part,) = response.content.parts
    assert part.function_call is None and "record it again" in part.text


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("task", _kernel_recordings())
def test_the_tools_still_refuse_each_recorded_first_attempt_as_recorded(task):
    """What a recording says the tools said is what they say: the first attempt is refused by the same check with
    the same hint family, and the shipped kernel (the fix) passes (scripts/record_attempt.py, as a reader runs it)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "record_attempt.py"
    spec = importlib.util.spec_from_file_location("record_attempt", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rec = _rec(task)
    found = script.attempt(rec)
    assert (found["refused_by"], found["hint_family"]) == (rec["attempt"]["refused_by"], rec["attempt"]["hint_family"])
