"""The unit tier's promise, enforced: a test marked `unit` that starts a sandboxed job or a libtpu compile fails."""

from __future__ import annotations

__all__ = ["forbid_heavy_work"]


def _refuse(what: str):
    def refuse(*_args, **_kwargs):
        raise AssertionError(f"a test marked unit {what}: move it out of the unit tier (unit = in-process, "
                             "no sandbox job, no libtpu compile)")

    return refuse


def forbid_heavy_work(monkeypatch) -> None:
    """Make every entry into the sandbox and into libtpu's deviceless compiler raise for this test."""
    from maxkernel.harness.jobs import compile_job
    from maxkernel.harness.sandbox import pool as sandbox

    monkeypatch.setattr(sandbox.Worker, "start", classmethod(_refuse("started a sandboxed worker")))
    monkeypatch.setattr(sandbox.Worker, "submit", _refuse("submitted a sandboxed job"))
    monkeypatch.setattr(sandbox, "run_job", _refuse("ran a sandboxed job"))
    monkeypatch.setattr(compile_job, "_topology_device", _refuse("started a libtpu compile"))
