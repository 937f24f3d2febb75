"""Agent-test set-up: the offline replay model, a private data folder, and a driver for real ADK Runner runs."""

from __future__ import annotations

import contextlib

import pytest
from google.adk import Runner
from google.adk.artifacts import FileArtifactService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

from maxkernel.settings import get_settings


@pytest.fixture
def replay_env(tmp_path, monkeypatch):
    """Replay model and data under tmp_path; call the result with MAXKERNEL_* overrides (settings re-read)."""
    monkeypatch.setenv("MAXKERNEL_MODEL", "replay")
    monkeypatch.setenv("MAXKERNEL_DATA_DIR", str(tmp_path / "data"))

    def configure(**values):
        for key, value in values.items():
            monkeypatch.setenv(f"MAXKERNEL_{key.upper()}", str(value))
        get_settings.cache_clear()
        return get_settings()

    configure()
    yield configure
    monkeypatch.undo()
    get_settings.cache_clear()  # later tests see the environment they started with


class Store:
    """Sessions in one SQLite file and artifacts in one folder; each `runner()` is a fresh process-like stack."""

    def __init__(self, root):
        self.db = root / "sessions.db"
        self.artifacts = root / "artifacts"

    def runner(self, policy: str = "auto"):
        from maxkernel.agents import build_app

        return Runner(app=build_app(policy), session_service=SqliteSessionService(str(self.db)),
                      artifact_service=FileArtifactService(root_dir=str(self.artifacts)))


@pytest.fixture
def sqlite_store(tmp_path):
    return Store(tmp_path)


async def _drive(runner: Runner, session_id: str, text: str, *, user: str = "u", until=None) -> list:
    """Send `text` and collect the run's events; stop the run early (as a killed client would) once `until(event)`."""
    events = []
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async with contextlib.aclosing(runner.run_async(user_id=user, session_id=session_id, new_message=message)) as run:
        async for event in run:
            events.append(event)
            if until is not None and until(event):
                break
    return events


@pytest.fixture
def drive():
    """`await drive(runner, session_id, text, until=...)` -> the run's events."""
    return _drive
