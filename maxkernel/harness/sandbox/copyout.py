"""Taking files out of a job's scratch folder: regular files only, never through a link, by names relative to
the scratch, with size caps. Everything in the scratch was written by candidate code and is treated as hostile."""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

__all__ = ["CopyOutError", "TreeCopy", "open_regular", "read_bytes", "read_json", "copy_tree", "copy_tree_into",
           "MAX_FILE_BYTES", "MAX_TREE_BYTES"]

MAX_FILE_BYTES = 4 << 30  # one file: the job's own file-size rlimit (full-size arrays run to hundreds of MiB)
MAX_TREE_BYTES = 1 << 30  # a whole profile trace
MAX_RESULT_BYTES = 8 << 20  # result.json and other small records
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class CopyOutError(ValueError):
    """A file in the scratch folder that the trusted side refuses to take (a link, a device, too large, ...)."""


def _parts(rel: str) -> list[str]:
    p = PurePosixPath(rel)
    if p.is_absolute() or not p.parts or any(part in ("..", "") for part in p.parts):
        raise CopyOutError(f"{rel!r} is not a plain name inside the scratch folder")
    return list(p.parts)


def _open_dir(root: Path, parts: list[str]) -> int:
    fd = os.open(root, _DIR)
    try:
        for part in parts:
            nxt = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError:
        os.close(fd)
        raise
    return fd


def _open_at(dir_fd: int, name: str, limit: int, shown: str) -> int:
    """An fd of regular file `name` in `dir_fd`, opened without following a link, at most `limit` bytes."""
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except OSError as exc:  # ELOOP: a symbolic link; ENOENT: absent
        raise CopyOutError(f"{shown}: {'a symbolic link' if exc.errno == errno.ELOOP else exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        os.close(fd)
        why = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"{st.st_size} bytes, over the {limit}-byte limit"
        raise CopyOutError(f"{shown}: {why}")
    os.set_blocking(fd, True)
    return fd


def _read_at(dir_fd: int, name: str, limit: int, shown: str) -> bytes:
    fd = _open_at(dir_fd, name, limit, shown)
    try:
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise CopyOutError(f"{shown}: grew past the {limit}-byte limit while read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def open_regular(scratch: Path, rel: str, limit: int = MAX_FILE_BYTES) -> BinaryIO:
    """Regular file `rel` inside `scratch`, opened for reading without following any link on the way (for large
    files: the caller streams it instead of holding a copy in memory)."""
    parts = _parts(rel)
    try:
        dir_fd = _open_dir(scratch, parts[:-1])
    except OSError as exc:
        raise CopyOutError(f"{rel}: {exc.strerror} on the way") from None
    try:
        return os.fdopen(_open_at(dir_fd, parts[-1], limit, rel), "rb")
    finally:
        os.close(dir_fd)


def read_bytes(scratch: Path, rel: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The content of regular file `rel` inside `scratch`, opened without following any link on the way."""
    parts = _parts(rel)
    try:
        dir_fd = _open_dir(scratch, parts[:-1])
    except OSError as exc:
        raise CopyOutError(f"{rel}: {exc.strerror} on the way") from None
    try:
        return _read_at(dir_fd, parts[-1], limit, rel)
    finally:
        os.close(dir_fd)


def read_json(scratch: Path, rel: str, limit: int = MAX_RESULT_BYTES):
    """Parsed JSON from `rel` inside `scratch`; CopyOutError for anything that is not a small regular file of JSON."""
    data = read_bytes(scratch, rel, limit)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise CopyOutError(f"{rel}: not JSON ({type(exc).__name__})") from None


@dataclass
class TreeCopy:
    """What `copy_tree` took and what it left, with why."""

    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "path: reason"
    bytes: int = 0


def copy_tree(scratch: Path, rel: str, dest: Path, *, file_limit: int = 256 << 20,
              total_limit: int = MAX_TREE_BYTES) -> TreeCopy:
    """Copy folder `rel` of `scratch` into `dest`: regular files and folders only; links, devices, FIFOs,
    sockets and oversized files are skipped and named. Nothing outside the scratch is ever read."""
    out = TreeCopy()
    try:
        root_fd = _open_dir(scratch, _parts(rel))
    except (OSError, CopyOutError) as exc:
        raise CopyOutError(f"{rel}: cannot open the folder ({exc})") from None
    dest.mkdir(parents=True, exist_ok=True)

    def walk(dir_fd: int, prefix: str, target: Path) -> None:
        with os.scandir(dir_fd) as entries:
            names = sorted((e.name, e.is_symlink(), e.is_dir(follow_symlinks=False)) for e in entries)
        for name, is_link, is_dir in names:
            shown = f"{prefix}{name}"
            if is_link:
                out.skipped.append(f"{shown}: a symbolic link")
            elif is_dir:
                try:
                    sub = os.open(name, _DIR, dir_fd=dir_fd)
                except OSError as exc:
                    out.skipped.append(f"{shown}/: {exc.strerror}")
                    continue
                try:
                    (target / name).mkdir(exist_ok=True)
                    walk(sub, f"{shown}/", target / name)
                finally:
                    os.close(sub)
            else:
                try:
                    data = _read_at(dir_fd, name, min(file_limit, total_limit - out.bytes), shown)
                except CopyOutError as exc:
                    out.skipped.append(str(exc))
                    continue
                fd = os.open(target / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                out.copied.append(shown)
                out.bytes += len(data)

    try:
        walk(root_fd, "", dest)
    finally:
        os.close(root_fd)
    return out


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _create_at(dir_fd: int, name: str, shown: str) -> int:
    """An fd of regular file `name` in `dir_fd` for writing, made if absent, emptied; never through a link. A link,
    FIFO, device, folder or file with other hard links already there is refused (CopyOutError), not written to."""
    try:
        fd = os.open(name, _CREATE, 0o644, dir_fd=dir_fd)  # no O_TRUNC: nothing is changed before the fstat check
    except OSError as exc:  # ELOOP: a link (dangling or not); ENXIO: a FIFO with no reader; EISDIR: a folder
        why = {errno.ELOOP: "a symbolic link", errno.ENXIO: "a FIFO"}.get(exc.errno, exc.strerror)
        raise CopyOutError(f"{shown}: {why} in the destination") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        why = "not a regular file" if not stat.S_ISREG(st.st_mode) else "a file with other hard links"
        raise CopyOutError(f"{shown}: {why} in the destination")
    os.set_blocking(fd, True)
    os.ftruncate(fd, 0)
    return fd


def copy_tree_into(scratch: Path, rel: str, dest_fd: int, *, file_limit: int = 256 << 20,
                   total_limit: int = MAX_TREE_BYTES) -> TreeCopy:
    """copy_tree into the open folder `dest_fd` (not closed here), where the destination is not trusted either:
    every folder and file there is made or opened from its parent's fd without following a link, so a link already
    in the destination (or swapped in during the copy) is skipped and named, never written through."""
    out = TreeCopy()
    try:
        root_fd = _open_dir(scratch, _parts(rel))
    except (OSError, CopyOutError) as exc:
        raise CopyOutError(f"{rel}: cannot open the folder ({exc})") from None

    def walk(dir_fd: int, prefix: str, target_fd: int) -> None:
        with os.scandir(dir_fd) as entries:
            names = sorted((e.name, e.is_symlink(), e.is_dir(follow_symlinks=False)) for e in entries)
        for name, is_link, is_dir in names:
            shown = f"{prefix}{name}"
            if is_link:
                out.skipped.append(f"{shown}: a symbolic link")
            elif is_dir:
                try:
                    sub = os.open(name, _DIR, dir_fd=dir_fd)
                except OSError as exc:
                    out.skipped.append(f"{shown}/: {exc.strerror}")
                    continue
                try:
                    try:
                        os.mkdir(name, 0o755, dir_fd=target_fd)
                    except FileExistsError:
                        pass
                    try:
                        dsub = os.open(name, _DIR, dir_fd=target_fd)
                    except OSError as exc:  # ENOTDIR: a link or a file there
                        why = "a symbolic link or not a folder" if exc.errno in (errno.ENOTDIR, errno.ELOOP) \
                            else exc.strerror
                        out.skipped.append(f"{shown}/: {why} in the destination")
                        continue
                    try:
                        walk(sub, f"{shown}/", dsub)
                    finally:
                        os.close(dsub)
                finally:
                    os.close(sub)
            else:
                try:
                    data = _read_at(dir_fd, name, min(file_limit, total_limit - out.bytes), shown)
                    fd = _create_at(target_fd, name, shown)
                except CopyOutError as exc:
                    out.skipped.append(str(exc))
                    continue
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                out.copied.append(shown)
                out.bytes += len(data)

    try:
        walk(root_fd, "", dest_fd)
    finally:
        os.close(root_fd)
    return out
