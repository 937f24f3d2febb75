"""Hostile probe, the head of a generated kernel (tests/harness/test_sandbox_v2.py appends a correct RMSNorm):
at import it tries every escape; any that works is raised, so only a sandbox that holds gives `correct`."""

import ctypes
import os
import socket


SECRETS = []  # filled in by the test: (path, marker) pairs planted where a user keeps secrets
ENV_MARKERS = []  # values planted in the environment
WRITES = []  # host paths outside the scratch folder
SOCKETS = []  # Unix sockets listening on the host
escaped = []

status = open("/proc/self/status").read()
for line in status.splitlines():
    if line.startswith("CapEff:") and int(line.split()[1], 16) != 0:
        escaped.append(f"capabilities {line.split()[1]}")
if os.getuid() == 0:
    escaped.append("uid 0")
libc = ctypes.CDLL(None, use_errno=True)
if libc.mount(b"none", b"/", None, 32 | 4096, None) == 0:  # MS_REMOUNT | MS_BIND, read-write
    escaped.append("remounted / read-write")
for target in (b"/usr", b"/proc", b"/etc/passwd"):
    if libc.umount2(target, 2) == 0:  # MNT_DETACH
        escaped.append(f"unmounted {target.decode()}")
if libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER: a nested user namespace would give capabilities back
    escaped.append("made a user namespace")
if libc.ptrace(16, 1, None, None) == 0:  # PTRACE_ATTACH to the sandbox's pid 1
    libc.ptrace(17, 1, None, None)  # PTRACE_DETACH, or pid 1 stays stopped
    escaped.append("attached to pid 1 with ptrace")
for path, marker in SECRETS:
    try:
        if marker in open(path, errors="replace").read():
            escaped.append(f"read {path}")
    except OSError:
        pass
for marker in ENV_MARKERS:
    if any(marker in v for v in os.environ.values()):
        escaped.append(f"saw {marker} in the environment")
for path in WRITES:
    try:
        with open(path, "w") as f:
            f.write("pwned")
        escaped.append(f"wrote {path}")
    except OSError:
        pass
for path in SOCKETS:
    try:
        socket.socket(socket.AF_UNIX).connect(path)
        escaped.append(f"connected to {path}")
    except OSError:
        pass
if escaped:
    raise RuntimeError("escaped: " + "; ".join(escaped))

