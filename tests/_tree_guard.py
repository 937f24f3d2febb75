"""What a test run left behind: files that appeared or changed in the checkout, and hostile-kernel targets."""

from __future__ import annotations

import glob
import os
import subprocess
from pathlib import Path

__all__ = ["OUTSIDE", "changes", "snapshot"]

# Where tests/harness's hostile kernels try to write; a test that aims there must clean up after itself.
OUTSIDE = ("/tmp/maxkernel-pwned*", "/var/tmp/maxkernel-pwned*", "~/.maxkernel-pwned*")
# Ignored files every run creates or updates: never reported.
_NOISE_DIRS = ("__pycache__", ".pytest_cache")

Snapshot = dict[str, tuple]  # path -> (git status code, mtime_ns, size); None fields for a path now gone


def _noise(path: str) -> bool:
    parts = path.rstrip("/").split("/")
    return parts[-1].endswith(".pyc") or any(p in _NOISE_DIRS or p.endswith(".egg-info") for p in parts)


def _stat(path: Path) -> tuple:
    try:
        st = path.lstat()
    except OSError:
        return (None, None)
    return (st.st_mtime_ns, st.st_size)


def snapshot(repo: Path, outside: tuple[str, ...] = OUTSIDE) -> Snapshot | None:
    """Every untracked, ignored or changed file under `repo` (git's view) and every file matching `outside`,
    with its size and modification time; None when `repo` is not a git checkout or git is missing."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "status", "--porcelain=v1", "-z", "--ignored",
                              "--untracked-files=all"], capture_output=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    snap: Snapshot = {}
    entries = out.decode(errors="surrogateescape").split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if "R" in code or "C" in code:
            i += 1  # a rename or copy is followed by its source path
        if not _noise(path):
            snap[path] = (code, *_stat(repo / path))
    for pattern in outside:
        for path in glob.glob(os.path.expanduser(pattern)):
            snap[path] = ("outside", *_stat(Path(path)))
    return snap


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """'<status> <path>' for each file of `after` that is new since `before` or has changed (status, size or
    modification time): what the run in between wrote."""
    return [f"{after[p][0]} {p}" for p in sorted(after) if before.get(p) != after[p]]
