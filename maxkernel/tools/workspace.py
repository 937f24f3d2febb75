"""The session's scoped workspace: the only files an agent can read or write; every write is also an artifact."""

from __future__ import annotations

from pathlib import Path

from google.adk.tools import ToolContext

from maxkernel.settings import get_settings

__all__ = ["workspace_dir", "resolve", "read_file", "write_file", "list_files", "WorkspaceError"]

_MAX_BYTES = 256 * 1024


class WorkspaceError(ValueError):
    """A path outside the workspace, or an unusable file."""


def workspace_dir(tool_context: ToolContext) -> Path:
    """The session's workspace folder (state 'workspace' if the orchestrator set it), created on first use."""
    ws = tool_context.state.get("workspace")
    path = Path(ws) if ws else get_settings().data_dir / "workspaces" / tool_context.session.id
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve(root: Path, rel: str) -> Path:
    """`rel` inside `root`; refuses absolute paths, '..' escapes and symlinks that leave the workspace."""
    if not rel or Path(rel).is_absolute():
        raise WorkspaceError(f"path {rel!r} refused: give a path relative to the workspace, e.g. kernel.py")
    root = root.resolve()
    try:
        target = (root / rel).resolve()
    except (OSError, ValueError) as exc:  # a NUL byte, a symlink loop, a name too long: a reply, not a crash
        raise WorkspaceError(f"path {rel!r} refused: {exc}") from exc
    if target != root and root not in target.parents:
        raise WorkspaceError(f"path {rel!r} refused: it leaves the workspace")
    return target


def read_file(path: str, tool_context: ToolContext) -> dict:
    """Reads a text file from the session workspace.

    Args:
        path: File path relative to the workspace (e.g. "kernel.py").

    Returns:
        {"path", "content"} or {"error"} when the file is missing or the path leaves the workspace.
    """
    try:
        target = resolve(workspace_dir(tool_context), path)
        if not target.is_file():
            return {"error": f"no file {path!r} in the workspace; list_files shows what is there"}
        return {"path": path, "content": target.read_text()[:_MAX_BYTES]}
    except (WorkspaceError, UnicodeDecodeError, OSError) as exc:
        return {"error": str(exc)}


async def write_file(path: str, content: str, tool_context: ToolContext) -> dict:
    """Writes a text file (e.g. the kernel) into the session workspace, keeping each version as an artifact.

    Args:
        path: File path relative to the workspace (e.g. "kernel.py").
        content: The whole file content.

    Returns:
        {"path", "bytes", "artifact_version"} or {"error"}.
    """
    from maxkernel.tools.plans import gate

    refused = gate(tool_context.state)  # HITL: only while the approved plan version is the current plan
    if refused:
        return {"error": refused}
    return await write_file_unchecked(path, content, tool_context)


async def write_file_unchecked(path: str, content: str, tool_context: ToolContext) -> dict:
    """write_file without the plan-approval gate: for a person's own draft (never offered to a model)."""
    if len(content.encode()) > _MAX_BYTES:
        return {"error": f"file too large (over {_MAX_BYTES} bytes)"}
    try:
        target = resolve(workspace_dir(tool_context), path)
    except WorkspaceError as exc:
        return {"error": str(exc)}
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    except OSError as exc:  # e.g. the path names a folder, or a name too long
        return {"error": f"could not write {path!r}: {exc}"}
    version = None
    try:
        from google.genai import types

        version = await tool_context.save_artifact(path.replace("/", "__"), types.Part.from_text(text=content))
    except ValueError:  # no artifact service configured: the file on disk is still written
        pass
    return {"path": path, "bytes": len(content.encode()), "artifact_version": version}


def list_files(tool_context: ToolContext) -> dict:
    """Lists the files in the session workspace.

    Returns:
        {"files": [relative paths]}.
    """
    root = workspace_dir(tool_context)
    return {"files": sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())}
