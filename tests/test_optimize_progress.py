"""`maxkernel optimize` progress lines: one line per message, a multi-line failure keeps its reason."""

import pytest
from google.adk.events import Event
from google.genai import types

from maxkernel.optimize import _describe

pytestmark = pytest.mark.unit


def _event(*parts):
    return Event(author="auto", content=types.Content(role="model", parts=list(parts)))


def test_a_multi_line_failure_keeps_its_reason_on_one_line():
    text = "compile_kernel for v5e failed:\nLowering failed: block shape (7, 100) is not divisible by (8, 128)\n"
    (line,) = _describe(_event(types.Part(text=text)))
    assert line == "auto: compile_kernel for v5e failed: Lowering failed: block shape (7, 100) is not divisible by (8, 128)"


def test_long_text_is_cut_and_tool_calls_hide_file_bodies():
    call = types.Part(function_call=types.FunctionCall(name="write_file", args={"path": "k.py", "content": "x" * 999}))
    text = "result: the kernel is correct " + "y" * 500 + " speedup 0.0111x (CPU interpreter time, not TPU time)"
    long_line, call_line = _describe(_event(types.Part(text=text), call))
    assert len(long_line) == len("auto: ") + 200 and "…" in long_line
    assert long_line.startswith("auto: result: the kernel is correct")  # the subject and the end both survive
    assert long_line.endswith("speedup 0.0111x (CPU interpreter time, not TPU time)")
    assert call_line == "auto -> write_file(path='k.py')"
