"""Sandbox roots left behind by a process that died without closing its pool (SIGKILL, an OOM kill, a server
terminated mid-call): each root names its owner (pid and the pid's start time, so a reused pid is not mistaken for
it), and the next pool in any process unmounts the scratch tmpfs mounts under a dead owner's root and removes it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["PREFIX", "claim", "sweep"]

PREFIX = "maxkernel-sandbox-"
OWNER = "owner"  # "<pid> <start time in clock ticks>" of the process whose pool made the root


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # fields after the command name, which may hold spaces


def claim(root: Path) -> None:
    """Mark `root` as this process's."""
    (root / OWNER).write_text(f"{os.getpid()} {_start_time(os.getpid())}")


def _owner_alive(root: Path) -> bool:
    try:
        pid_text, started = (root / OWNER).read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return True  # no owner yet (being made), or a root from before owners were written: not ours to judge
    return _start_time(pid) == started


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root) + "/"
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    points = [ln.split()[1].replace("\\040", " ") for ln in lines if len(ln.split()) > 1]
    return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)


def sweep(tmp: str | Path | None = None) -> list[Path]:
    """Remove the sandbox roots in `tmp` (the temp folder by default) whose owner is dead; returns them."""
    removed = []
    for root in sorted(Path(tmp or tempfile.gettempdir()).glob(PREFIX + "*")):
        if not root.is_dir() or root.is_symlink() or _owner_alive(root):
            continue
        for point in _mounts_under(root):
            subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)
        shutil.rmtree(root, ignore_errors=True)
        if not root.exists():
            removed.append(root)
    return removed
