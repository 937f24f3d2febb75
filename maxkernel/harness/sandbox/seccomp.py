"""A seccomp filter for sandboxed jobs, the second layer under the user namespace: the system calls that change
mounts or namespaces, trace other processes, load kernel code or reach kernel keyrings fail with EPERM.

Assembled here as classic BPF (what bubblewrap's --seccomp takes), so no libseccomp is needed; on an
architecture without a table below, no filter is built and the namespace alone holds.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

__all__ = ["DENIED", "filter_program", "filter_fd"]

DENIED = ("mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "ptrace", "process_vm_readv",
          "process_vm_writev", "bpf", "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load",
          "init_module", "finit_module", "delete_module", "add_key", "request_key", "keyctl", "open_by_handle_at",
          "name_to_handle_at", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
          "swapon", "swapoff", "reboot", "acct", "quotactl", "iopl", "ioperm", "personality")

# (AUDIT_ARCH value, {name: number}) per machine; numbers from the kernel's syscall tables.
_ARCH = {
    "x86_64": (0xC000003E, {
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "add_key": 248, "request_key": 249, "keyctl": 250, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429,
        "open_tree": 428, "mount_setattr": 442, "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163,
        "quotactl": 179, "iopl": 172, "ioperm": 173, "personality": 135}),
    "aarch64": (0xC00000B7, {
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
        "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "add_key": 217, "request_key": 218, "keyctl": 219, "open_by_handle_at": 265, "name_to_handle_at": 264,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "mount_setattr": 442, "swapon": 224, "swapoff": 225, "reboot": 142, "acct": 89, "quotactl": 60,
        "personality": 92}),
}

_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
_ALLOW, _KILL, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000  # SECCOMP_RET_ALLOW / KILL_PROCESS / ERRNO
_X32_BIT = 0x40000000


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def filter_program(machine: str | None = None) -> bytes | None:
    """The filter as bytes of `struct sock_filter`, or None where this machine has no table."""
    machine = machine or platform.machine()
    if machine not in _ARCH:
        return None
    arch, numbers = _ARCH[machine]
    nrs = sorted({numbers[name] for name in DENIED if name in numbers})
    prog = [_insn(_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
            _insn(_JEQ_K, 1, 0, arch),
            _insn(_RET_K, 0, 0, _KILL),  # another ABI (e.g. 32-bit calls) would bypass the numbers below
            _insn(_LD_W_ABS, 0, 0, 0)]  # seccomp_data.nr
    if machine == "x86_64":  # x32 calls share the architecture value: refuse them outright
        prog += [_insn(0x45, 0, 1, _X32_BIT), _insn(_RET_K, 0, 0, _KILL)]  # JSET
    for i, nr in enumerate(nrs):
        # match -> jump to the EPERM return after the remaining comparisons and the ALLOW
        prog.append(_insn(_JEQ_K, len(nrs) - i, 0, nr))
    prog += [_insn(_RET_K, 0, 0, _ALLOW), _insn(_RET_K, 0, 0, _ERRNO | errno.EPERM)]
    return b"".join(prog)


def filter_fd() -> int | None:
    """A file descriptor holding the filter, for `bwrap --seccomp FD` (the caller passes and then closes it)."""
    prog = filter_program()
    if prog is None:
        return None
    fd = os.memfd_create("maxkernel-seccomp", 0)  # not close-on-exec: bubblewrap reads it after exec
    os.write(fd, prog)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
