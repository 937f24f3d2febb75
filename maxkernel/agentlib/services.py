"""Session and artifact services from URIs: embedded SQLite and local files by default, Vertex AI Agent
Engine and Google Cloud Storage for teams."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from maxkernel.settings import Settings, get_settings

__all__ = ["session_service", "artifact_service", "default_session_uri", "default_artifact_uri"]


def default_session_uri(s: Settings | None = None) -> str:
    s = s or get_settings()
    return s.session_uri or f"sqlite:///{s.data_dir / 'sessions.db'}"


def default_artifact_uri(s: Settings | None = None) -> str:
    s = s or get_settings()
    return s.artifact_uri or f"file://{s.data_dir / 'artifacts'}"


def _need(module: str, what: str) -> None:
    """A clear error, before any work, when a team store's client library is not installed."""
    if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
        raise ValueError(f"{what} needs the gcp extra: pip install 'maxkernel[gcp]' (missing {module})")


def session_service(uri: str | None = None):
    """memory://, sqlite:///path (default), agentengine://ID or projects/.../reasoningEngines/ID,
    or a SQLAlchemy URL (postgresql://...)."""
    s = get_settings()
    uri = uri or default_session_uri(s)
    if uri.startswith("memory://"):
        from google.adk.sessions import InMemorySessionService

        return InMemorySessionService()
    if uri.startswith("sqlite:///"):
        from google.adk.sessions.sqlite_session_service import SqliteSessionService

        path = Path(uri[len("sqlite:///"):]).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        return SqliteSessionService(str(path))
    if uri.startswith("agentengine://") or "/reasoningEngines/" in uri:
        _need("agentplatform", "a Vertex AI Agent Engine session store")
        from google.adk.sessions import VertexAiSessionService

        engine = uri[len("agentengine://"):] if uri.startswith("agentengine://") else uri
        if not s.google_cloud_project:
            raise ValueError("a Vertex AI Agent Engine session store needs GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION")
        return VertexAiSessionService(project=s.google_cloud_project, location=s.google_cloud_location,
                                      agent_engine_id=engine)
    from google.adk.sessions import DatabaseSessionService

    return DatabaseSessionService(db_url=uri)


def artifact_service(uri: str | None = None):
    """memory://, file:///path (default) or gs://bucket (honours STORAGE_EMULATOR_HOST)."""
    uri = uri or default_artifact_uri()
    if uri.startswith("memory://"):
        from google.adk.artifacts import InMemoryArtifactService

        return InMemoryArtifactService()
    if uri.startswith("file://"):
        from google.adk.artifacts import FileArtifactService

        root = Path(uri[len("file://"):]).expanduser()
        root.mkdir(parents=True, exist_ok=True)
        return FileArtifactService(root_dir=str(root))
    if uri.startswith("gs://"):
        _need("google.cloud.storage", "a gs:// artifact store")
        from google.adk.artifacts import GcsArtifactService

        return GcsArtifactService(bucket_name=uri[len("gs://"):].strip("/"))
    raise ValueError(f"unknown artifact URI {uri!r}: use memory://, file:///path or gs://bucket")
