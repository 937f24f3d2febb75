"""The local worker pool: nodes run on threads, with separate limits for model calls and device evaluations.

Each node runs its own ADK Runner on its own thread and event loop, so a tool that blocks (a sandboxed
compile, a profile) stalls only its node. The limits are enforced per model call and per device tool by a
plugin, not per node: nodes overlap their model calls while one TPU judges one kernel at a time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.adk.plugins.base_plugin import BasePlugin

from maxkernel.agents.roots.search_node import SEARCH_KEY, lookup, register, unregister

__all__ = ["Slots", "SearchContext", "register", "lookup", "unregister", "LimitsPlugin", "LocalPool",
           "SEARCH_KEY", "DEVICE_TOOLS"]

DEVICE_TOOLS = ("test_kernel", "profile_kernel", "tune_kernel")  # tools that run the kernel on the device


class Slots:
    """Counting limits: model calls in flight, device evaluations in flight."""

    def __init__(self, model: int, device: int | None):
        self.model = threading.BoundedSemaphore(model)
        self.device = threading.BoundedSemaphore(device) if device else None
        self.peak = {"model": 0, "device": 0}
        self._now = {"model": 0, "device": 0}
        self._lock = threading.Lock()

    def _count(self, kind: str, delta: int) -> None:
        with self._lock:
            self._now[kind] += delta
            self.peak[kind] = max(self.peak[kind], self._now[kind])

    def acquire(self, kind: str) -> None:
        sem = getattr(self, kind)
        if sem is not None:
            sem.acquire()
        self._count(kind, 1)

    def release(self, kind: str) -> None:
        self._count(kind, -1)
        sem = getattr(self, kind)
        if sem is not None:
            sem.release()

    @contextmanager
    def device_slot(self):
        self.acquire("device")
        try:
            yield
        finally:
            self.release("device")


@dataclass
class SearchContext:
    """What a node's agents reach through session state: the cascade, the limits and the search config."""

    cascade: Any
    slots: Slots
    config: Any


class LimitsPlugin(BasePlugin):
    """Holds a model slot for each model call and a device slot for each device tool; answers the debugger's
    compile_kernel/test_kernel from the search's cascade, so they are memoised and run where evaluations run."""

    def __init__(self):
        super().__init__(name="maxkernel_search_limits")
        self._held: dict[tuple, str] = {}
        self._lock = threading.Lock()

    def _hold(self, key: tuple, ctx: SearchContext, kind: str) -> None:
        ctx.slots.acquire(kind)
        with self._lock:
            self._held[key] = kind

    def _drop(self, key: tuple, ctx: SearchContext | None) -> None:
        with self._lock:
            kind = self._held.pop(key, None)
        if kind and ctx is not None:
            ctx.slots.release(kind)

    def release_all(self, ctx: SearchContext | None) -> None:
        """Give back whatever a run that ended abnormally (cancelled, crashed mid-call) still holds."""
        for key in list(self._held):
            self._drop(key, ctx)

    async def before_model_callback(self, *, callback_context, llm_request):
        ctx = lookup(callback_context.state.get(SEARCH_KEY))
        if ctx is not None:
            await asyncio.to_thread(self._hold, ("model", callback_context.invocation_id,
                                                 callback_context.agent_name), ctx, "model")
        return None

    async def after_model_callback(self, *, callback_context, llm_response):
        if not llm_response.partial:
            self._drop(("model", callback_context.invocation_id, callback_context.agent_name),
                       lookup(callback_context.state.get(SEARCH_KEY)))
        return None

    async def on_model_error_callback(self, *, callback_context, llm_request, error):
        self._drop(("model", callback_context.invocation_id, callback_context.agent_name),
                   lookup(callback_context.state.get(SEARCH_KEY)))
        return None

    async def before_tool_callback(self, *, tool, tool_args, tool_context):
        ctx = lookup(tool_context.state.get(SEARCH_KEY))
        if ctx is None:
            return None
        answer = await asyncio.to_thread(self._from_cascade, ctx, tool.name, tool_args, tool_context)
        if answer is not None:
            return answer
        if tool.name in DEVICE_TOOLS:
            await asyncio.to_thread(self._hold, ("tool", tool_context.function_call_id), ctx, "device")
        return None

    async def after_tool_callback(self, *, tool, tool_args, tool_context, result):
        self._drop(("tool", tool_context.function_call_id), lookup(tool_context.state.get(SEARCH_KEY)))
        return None

    async def on_tool_error_callback(self, *, tool, tool_args, tool_context, error):
        self._drop(("tool", tool_context.function_call_id), lookup(tool_context.state.get(SEARCH_KEY)))
        return None

    @staticmethod
    def _from_cascade(ctx: SearchContext, name: str, args: dict, tool_context) -> dict | None:
        if name not in ("compile_kernel", "test_kernel") or (args.get("path") or "kernel.py") != "kernel.py":
            return None
        if name == "compile_kernel" and (args.get("chip") or ctx.config.chip) != ctx.config.chip:
            return None
        kernel = Path(tool_context.state.get("workspace", "")) / "kernel.py"
        if not kernel.is_file():
            return None  # the tool itself says what is missing
        stage = "compile" if name == "compile_kernel" else "interpret"
        return ctx.cascade.stage(stage, kernel.read_text(), tool_context.state.get("memo_scope", ""))[0]


class LocalPool:
    """Runs node jobs on `workers` threads; `fn(job)` must handle its own errors."""

    def __init__(self, workers: int):
        self.workers = workers

    def run(self, jobs: Iterable, fn: Callable[[Any], None]) -> None:
        jobs = list(jobs)
        if not jobs:
            return
        pool = ThreadPoolExecutor(max_workers=min(self.workers, len(jobs)), thread_name_prefix="mk-node")
        try:
            for f in [pool.submit(fn, j) for j in jobs]:
                f.result()
        except BaseException:
            # Ctrl-C or a crash: queued nodes stay pending (for a resume); those in flight finish or die.
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
