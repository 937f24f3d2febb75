"""Reading a person's draft file (a kernel or a plan they wrote) for a HITL session.

The path comes from the chat, so from the model: it may only name a regular text file inside the drafts folder
(MAXKERNEL_DRAFTS_DIR, default the folder the app was started in), never one under maxkernel's data folder,
where the model's own workspace files live (a model must not hand in its own writing as the person's draft).
"""

from __future__ import annotations

from pathlib import Path

from maxkernel.settings import get_settings

__all__ = ["DraftError", "read_draft", "resolve_draft", "MAX_DRAFT_BYTES"]

MAX_DRAFT_BYTES = 256 * 1024


class DraftError(ValueError):
    """A draft path that is refused or unreadable; the message says why in one line."""


def drafts_root() -> Path:
    s = get_settings()
    return (s.drafts_dir or Path.cwd()).resolve()


def resolve_draft(path: str) -> Path:
    """The regular file `path` names inside the drafts folder (relative to it, or absolute inside it), never one
    in the data folder; DraftError says why not."""
    if not path or "\x00" in path:
        raise DraftError("give the draft file's path, e.g. my_kernel.py")
    root = drafts_root()
    try:
        target = (root / Path(path).expanduser()).resolve()
    except (OSError, ValueError) as exc:
        raise DraftError(f"draft path {path!r} refused: {exc}") from exc
    if target != root and root not in target.parents:
        raise DraftError(f"draft path {path!r} refused: drafts are read from {root} (set MAXKERNEL_DRAFTS_DIR)")
    data = get_settings().data_dir.resolve()
    if target == data or data in target.parents:
        raise DraftError(f"draft path {path!r} refused: it is in maxkernel's data folder, where the agents write")
    if not target.is_file():
        raise DraftError(f"no draft file {path!r} in {root}")
    return target


def read_draft(path: str) -> str:
    """The text of the draft at `path` (relative to the drafts folder, or absolute inside it)."""
    target = resolve_draft(path)
    if target.stat().st_size > MAX_DRAFT_BYTES:
        raise DraftError(f"draft {path!r} is over {MAX_DRAFT_BYTES} bytes")
    try:
        return target.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise DraftError(f"draft {path!r} is not a readable text file: {exc}") from exc
