"""Files under a root folder, opened by file descriptor: never a check on a name and then an open of it.

Every function walks from an O_DIRECTORY|O_NOFOLLOW descriptor of the root, one component at a time, each opened
relative to its parent's descriptor with O_NOFOLLOW. A symbolic link anywhere on the way, the last component
included, is refused (even one that would stay inside the root), so a local process that swaps a file or a folder
for a link between two calls can never make one of these reach outside the root. Paths are relative and plain:
absolute paths, '..', empty names and NUL bytes are refused before anything is opened.

`root` is a folder path (its last component must not itself be a link: resolve a configured root first) or an open
folder descriptor, which is used as it is and never closed here.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from contextlib import contextmanager
from pathlib import PurePosixPath
from typing import Iterator, Union

__all__ = ["WorkspaceError", "SafePathError", "parts", "read_bytes", "read_text", "write_bytes", "write_text",
           "open_dir", "make_dirs", "list_files"]

Root = Union[str, os.PathLike, int]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC  # NONBLOCK: a FIFO does not hang the open
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC  # no O_TRUNC before the fstat check
_MAX_DEPTH = 64


class WorkspaceError(ValueError):
    """A path outside the workspace, or an unusable file."""


class SafePathError(WorkspaceError):
    """A path refused: its shape ('..', absolute, empty, NUL), or a link or non-regular file on the way."""


def parts(rel: str) -> list[str]:
    """The components of relative path `rel` ('.' and repeated slashes dropped); SafePathError for anything else.
    An empty list means the root itself (rel '.')."""
    if not isinstance(rel, str) or not rel:
        raise SafePathError(f"path {rel!r} refused: give a path relative to the workspace, e.g. kernel.py")
    if "\0" in rel:
        raise SafePathError(f"path {rel!r} refused: it contains a NUL byte")
    p = PurePosixPath(rel)
    if p.is_absolute():
        raise SafePathError(f"path {rel!r} refused: give a path relative to the workspace, e.g. kernel.py")
    if ".." in p.parts:
        raise SafePathError(f"path {rel!r} refused: '..' is not allowed (it leaves the workspace or names a link)")
    return list(p.parts)


def _link_refusal(rel: str, shown: str) -> SafePathError:
    return SafePathError(f"path {rel!r} refused: {shown!r} is a symbolic link (links are never followed here)")


@contextmanager
def _root_fd(root: Root) -> Iterator[int]:
    if isinstance(root, int):
        yield root
        return
    try:
        fd = os.open(root, _DIR)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(root):
            raise SafePathError(f"the root folder {os.fspath(root)!r} is a symbolic link; links are never followed")
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def _subdir(dir_fd: int, name: str, rel: str, shown: str, *, create: bool = False, exist_ok: bool = True) -> int:
    """An fd of folder `name` in `dir_fd`, never through a link; made first if `create`."""
    if create:
        try:
            os.mkdir(name, 0o777, dir_fd=dir_fd)
        except FileExistsError:
            if not exist_ok:
                raise
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            raise exc from None
        if stat.S_ISLNK(st.st_mode):
            raise _link_refusal(rel, shown) from None
        raise NotADirectoryError(errno.ENOTDIR, f"{shown!r} is not a folder", rel) from None


def _walk(root_fd: int, names: list[str], rel: str, *, create: bool = False) -> int:
    """A new fd of folder root/names..., each component opened from its parent's fd without following links."""
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(names):
            nxt = _subdir(fd, name, rel, "/".join(names[: i + 1]), create=create)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def open_dir(root: Root, rel: str = ".") -> Iterator[int]:
    """A descriptor of existing folder `rel` under `root` (rel '.' is the root), reached without following links."""
    names = parts(rel)
    with _root_fd(root) as rfd:
        fd = _walk(rfd, names, rel)
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def make_dirs(root: Root, rel: str, *, exist_ok: bool = True) -> Iterator[int]:
    """A descriptor of folder `rel` under `root`, its missing folders made on the way (mkdir at the parent's fd),
    never through a link. With exist_ok=False the last folder must be new (FileExistsError otherwise)."""
    names = parts(rel)
    with _root_fd(root) as rfd:
        if not names:
            fd = os.dup(rfd)
        else:
            parent = _walk(rfd, names[:-1], rel, create=True)
            try:
                fd = _subdir(parent, names[-1], rel, "/".join(names), create=True, exist_ok=exist_ok)
            finally:
                os.close(parent)
    try:
        yield fd
    finally:
        os.close(fd)


def _open_file(root: Root, rel: str, flags: int, *, create_parents: bool = False) -> int:
    """An fd of regular file `rel` under `root`, opened with `flags` (which carry O_NOFOLLOW) from its folder's fd."""
    names = parts(rel)
    if not names:
        raise IsADirectoryError(errno.EISDIR, "that is the workspace folder itself, not a file", rel)
    with _root_fd(root) as rfd:
        parent = _walk(rfd, names[:-1], rel, create=create_parents)
    try:
        fd = os.open(names[-1], flags, 0o644, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_refusal(rel, "/".join(names)) from None
        if exc.errno == errno.ENXIO:  # a FIFO with no reader, opened for writing
            raise SafePathError(f"path {rel!r} refused: not a regular file") from None
        raise
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", rel)
            raise SafePathError(f"path {rel!r} refused: not a regular file")
        if flags & os.O_WRONLY and st.st_nlink > 1:
            raise SafePathError(f"path {rel!r} refused: the file has other hard links, and writing it would change "
                                "them too")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_fd(fd: int, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes from `fd`, and whether there was more."""
    chunks, total = [], 0
    while total <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    data = b"".join(chunks)
    return data[:limit], len(data) > limit


def read_bytes(root: Root, rel: str, limit: int) -> bytes:
    """The content of regular file `rel` under `root`; a file over `limit` bytes is refused (SafePathError)."""
    fd = _open_file(root, rel, _READ)
    try:
        data, more = _read_fd(fd, limit)
    finally:
        os.close(fd)
    if more:
        raise SafePathError(f"path {rel!r} refused: over the {limit}-byte limit")
    return data


def read_text(root: Root, rel: str, limit: int) -> str:
    """The first `limit` characters of UTF-8 text file `rel` under `root` (UnicodeDecodeError if it is not text);
    at most 4*limit bytes are read."""
    fd = _open_file(root, rel, _READ)
    try:
        data, more = _read_fd(fd, 4 * limit)
    finally:
        os.close(fd)
    # A cut file may end inside a character: an incremental decoder keeps that tail back instead of failing.
    return codecs.getincrementaldecoder("utf-8")().decode(data, final=not more)[:limit]


def write_bytes(root: Root, rel: str, data: bytes) -> int:
    """Write `data` as regular file `rel` under `root`, making missing parent folders; returns the bytes written.
    The file is opened O_NOFOLLOW|O_CREAT from its folder's fd and truncated only once fstat shows a regular file
    with no other hard links: a link, a FIFO, a device or a folder there is refused, never written through."""
    fd = _open_file(root, rel, _WRITE, create_parents=True)
    with os.fdopen(fd, "wb") as f:
        os.ftruncate(fd, 0)
        f.write(data)
    return len(data)


def write_text(root: Root, rel: str, text: str) -> int:
    """write_bytes of `text` in UTF-8."""
    return write_bytes(root, rel, text.encode())


def list_files(root: Root, *, max_files: int = 100_000) -> list[str]:
    """Relative paths ('/'-separated, sorted) of the regular files under `root`. Links are neither listed nor
    entered; FIFOs, sockets and devices are left out; folders deeper than 64 levels are not entered."""
    out: list[str] = []

    def walk(fd: int, prefix: str, depth: int) -> None:
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in it]
        for name, is_dir, is_file in sorted(entries):
            if len(out) >= max_files:
                return
            if is_file:
                out.append(prefix + name)
            elif is_dir and depth < _MAX_DEPTH:
                try:
                    sub = os.open(name, _DIR, dir_fd=fd)  # swapped for a link since the scan: ENOTDIR, skipped
                except OSError:
                    continue
                try:
                    walk(sub, f"{prefix}{name}/", depth + 1)
                finally:
                    os.close(sub)

    with _root_fd(root) as rfd:
        walk(rfd, "", 0)
    return sorted(out)
