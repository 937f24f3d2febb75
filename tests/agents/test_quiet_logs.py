"""Lines a user should not see: ADK's app-name guess (it infers "roots" from where our root agent's class lives and
warns on every run that our policy-named app differs)."""

import logging
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def test_adks_app_name_guess_is_not_printed(caplog, monkeypatch):
    from google.adk import Runner
    from google.adk.sessions import InMemorySessionService

    from maxkernel.agents import build_app

    monkeypatch.chdir(REPO)  # where ADK's guess fires: the root agent's module lies under agents/ below the cwd
    with caplog.at_level(logging.WARNING):
        runner = Runner(app=build_app("auto", "replay"), session_service=InMemorySessionService())
    assert runner.app_name == "auto"
    assert "App name mismatch" not in caplog.text
