"""Cancel scopes: every sandboxed worker started or taken from a pool while a scope is current belongs to it, and
cancelling the scope kills them all and refuses further starts in it (a cancelled call leaves no process behind).

Workers run in their own sessions, so ending the thread that waits on one does nothing to it: the scope holds the
workers themselves. The scope is a context variable, so it follows a call into `asyncio.to_thread` and into the
harness's helper threads that copy the caller's context (`judge_pair`, `estimate`).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Callable, Iterator

__all__ = ["CancelScope", "Cancelled", "current", "cancel_scope"]


class Cancelled(BaseException):
    """The call was cancelled: raised by a start in a cancelled scope. A BaseException, so the harness's own
    `except Exception` handlers (which turn a failure into a verdict) do not swallow it."""


class CancelScope:
    """The live workers of one call; `cancel()` kills them and makes every later start in the scope raise
    `Cancelled`. `on_event`, when given, hears one line per sandboxed job started and finished (progress)."""

    def __init__(self, on_event: Callable[[str], None] | None = None):
        self._lock = threading.Lock()
        self._workers: dict[int, object] = {}  # by id: a Worker is a dataclass, compared by value, not hashable
        self._cancelled = False
        self.on_event = on_event

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def check(self) -> None:
        """Raise `Cancelled` if the scope has been cancelled."""
        if self._cancelled:
            raise Cancelled("the call was cancelled: no new sandboxed job is started")

    def adopt(self, worker) -> None:
        """Make `worker` (anything with `kill()`) this scope's; in a cancelled scope it is killed at once and
        `Cancelled` raised. A worker belongs to one scope: adopting it takes it from the one before."""
        previous = getattr(worker, "cancel_scope", None)
        if previous is not None and previous is not self:
            previous.release(worker)
        with self._lock:
            if not self._cancelled:
                self._workers[id(worker)] = worker
                worker.cancel_scope = self
                return
        worker.kill()
        self.check()

    def release(self, worker) -> None:
        with self._lock:
            if self._workers.get(id(worker)) is worker:
                del self._workers[id(worker)]

    def cancel(self) -> int:
        """Kill every live worker of the scope; returns how many were signalled."""
        with self._lock:
            self._cancelled = True
            workers, self._workers = list(self._workers.values()), {}
        for w in workers:
            w.kill()
        return len(workers)

    def event(self, text: str) -> None:
        if self.on_event is not None:
            try:
                self.on_event(text)
            except Exception:  # noqa: BLE001 - a listener's failure never fails the job
                pass


_CURRENT: contextvars.ContextVar[CancelScope | None] = contextvars.ContextVar("maxkernel_cancel_scope", default=None)


def current() -> CancelScope | None:
    """The scope of the running call, or None outside any."""
    return _CURRENT.get()


@contextlib.contextmanager
def cancel_scope(scope: CancelScope | None = None) -> Iterator[CancelScope]:
    """Run the body inside `scope` (a new one when not given)."""
    scope = scope or CancelScope()
    token = _CURRENT.set(scope)
    try:
        yield scope
    finally:
        _CURRENT.reset(token)
