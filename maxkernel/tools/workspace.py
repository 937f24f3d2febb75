"""The session's scoped workspace: the only files an agent can read or write; every write is also an artifact.

Files are read, written and listed through `safepath`: opened by descriptor from the workspace folder, one
component at a time, never through a symbolic link, so nothing is opened by name after a check. `resolve` stays
for code that needs a path string (e.g. to hand a kernel file to a sandboxed job)."""

from __future__ import annotations

from pathlib import Path

from google.adk.tools import ToolContext

from maxkernel.settings import get_settings
from maxkernel.tools import safepath
from maxkernel.tools.safepath import SafePathError, WorkspaceError

__all__ = ["workspace_dir", "resolve", "read_file", "write_file", "list_files", "WorkspaceError", "SafePathError"]

_MAX_BYTES = 256 * 1024


def workspace_dir(tool_context: ToolContext) -> Path:
    """The session's workspace folder (state 'workspace' if the orchestrator set it), created on first use."""
    ws = tool_context.state.get("workspace")
    path = Path(ws) if ws else get_settings().data_dir / "workspaces" / tool_context.session.id
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve(root: Path, rel: str) -> Path:
    """`rel` inside `root`; refuses absolute paths, '..' escapes and symlinks that leave the workspace.

    A check on names only: a file opened by this name afterwards may have been swapped for a link in between.
    Read and write workspace files with `safepath` (as read_file/write_file do), which opens them by descriptor."""
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
        return {"path": path, "content": safepath.read_text(_root(tool_context), path, _MAX_BYTES)}
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return {"error": f"no file {path!r} in the workspace; list_files shows what is there"}
    except UnicodeDecodeError as exc:
        return {"error": f"{path!r} is not UTF-8 text: {exc}"}
    except (WorkspaceError, OSError) as exc:
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
        safepath.write_text(_root(tool_context), path, content)
    except WorkspaceError as exc:  # the path's shape, a link on the way, a FIFO or hard-linked file there
        return {"error": str(exc)}
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
    try:
        return {"files": safepath.list_files(_root(tool_context))}
    except (WorkspaceError, OSError) as exc:
        return {"error": f"could not list the workspace: {exc}"}


def _root(tool_context: ToolContext) -> Path:
    """The workspace folder, its own links resolved (it is configuration; everything under it is opened by fd)."""
    return workspace_dir(tool_context).resolve()
