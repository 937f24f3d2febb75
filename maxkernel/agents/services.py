"""Session and artifact services from URIs: embedded SQLite and local files by default, Vertex AI Agent
Engine and Google Cloud Storage for teams."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from maxkernel.settings import Settings, get_settings

__all__ = ["session_service", "artifact_service", "agent_engine", "default_session_uri", "default_artifact_uri"]


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


def agent_engine(uri: str) -> tuple[str | None, str | None, str]:
    """(project, location, engine id) from agentengine://ID, agentengine://projects/P/locations/L/reasoningEngines/ID
    or the bare full resource name; project and location are None when only an id is given."""
    name = uri[len("agentengine://"):] if uri.startswith("agentengine://") else uri
    m = re.fullmatch(r"/*projects/([^/]+)/locations/([^/]+)/reasoningEngines/([^/]+)/*", name)
    if m:
        return m.group(1), m.group(2), m.group(3)
    if not name or "/" in name.strip("/"):
        raise ValueError(f"Agent Engine {uri!r} not understood: use agentengine://ID or "
                         "projects/P/locations/L/reasoningEngines/ID")
    return None, None, name.strip("/")


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

        project, location, engine = agent_engine(uri)
        project, location = project or s.google_cloud_project, location or s.google_cloud_location
        if not project:
            raise ValueError("a Vertex AI Agent Engine session store needs GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION"
                             " (or the full name projects/P/locations/L/reasoningEngines/ID)")
        return VertexAiSessionService(project=project, location=location, agent_engine_id=engine)
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
