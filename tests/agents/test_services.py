"""Session and artifact stores from URIs: real SQLite and local files by default, clear errors for the rest."""

import importlib.util

import pytest
from google.adk.artifacts import FileArtifactService, InMemoryArtifactService
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService

from maxkernel.agents import services

pytestmark = pytest.mark.unit


def test_defaults_live_under_the_data_folder(replay_env, tmp_path):
    assert services.default_session_uri() == f"sqlite:///{tmp_path / 'data' / 'sessions.db'}"
    assert services.default_artifact_uri() == f"file://{tmp_path / 'data' / 'artifacts'}"
    assert isinstance(services.session_service(), SqliteSessionService)
    assert isinstance(services.artifact_service(), FileArtifactService)
    assert (tmp_path / "data" / "artifacts").is_dir()


async def test_a_sqlite_session_is_written_to_the_file_and_read_back(replay_env, tmp_path):
    db = tmp_path / "nested" / "s.db"
    store = services.session_service(f"sqlite:///{db}")
    created = await store.create_session(app_name="auto", user_id="u", state={"task": "12p_RMSNorm"})
    assert db.is_file()
    again = await services.session_service(f"sqlite:///{db}").get_session(app_name="auto", user_id="u",
                                                                             session_id=created.id)
    assert again.state["task"] == "12p_RMSNorm"


def test_memory_stores(replay_env):
    assert isinstance(services.session_service("memory://"), InMemorySessionService)
    assert isinstance(services.artifact_service("memory://"), InMemoryArtifactService)


def test_refusals_say_what_would_be_accepted(replay_env, monkeypatch):
    with pytest.raises(ValueError, match="use memory://, file:///path or gs://bucket"):
        services.artifact_service("s3://bucket")
    with pytest.raises(ValueError, match="GOOGLE_CLOUD_PROJECT"):
        services.session_service("agentengine://123")
    real = importlib.util.find_spec
    monkeypatch.setattr(services.importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("google.cloud.storage") else real(name, *a))
    with pytest.raises(ValueError, match=r"gs:// artifact store needs the gcp extra: pip install 'maxkernel\[gcp\]'"):
        services.artifact_service("gs://bucket")


@pytest.mark.parametrize("uri, parsed", [
    ("agentengine://123", (None, None, "123")),
    ("projects/p1/locations/europe-west4/reasoningEngines/456", ("p1", "europe-west4", "456")),
    ("agentengine://projects/p1/locations/us-central1/reasoningEngines/789", ("p1", "us-central1", "789")),
])
def test_agent_engine_names_by_id_or_full_resource_name(uri, parsed):
    assert services.agent_engine(uri) == parsed


def test_a_malformed_agent_engine_name_is_refused():
    with pytest.raises(ValueError, match="reasoningEngines/ID"):
        services.agent_engine("agentengine://projects/p1/reasoningEngines/1")


def test_a_full_resource_name_builds_the_store_without_project_settings(replay_env, monkeypatch):
    pytest.importorskip("agentplatform")
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    replay_env()
    svc = services.session_service("projects/p1/locations/europe-west4/reasoningEngines/456")
    assert (svc._project, svc._location, svc._agent_engine_id) == ("p1", "europe-west4", "456")
