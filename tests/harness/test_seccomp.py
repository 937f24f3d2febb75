"""The seccomp filter, in a real sandbox: the denied calls fail with EPERM, everything a job needs still works."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from maxkernel.harness.sandbox import seccomp
from maxkernel.harness.sandbox.pool import _bwrap_prefix, isolation_mode

pytestmark = pytest.mark.integration

PROBE = r"""
import ctypes, json, os, errno
libc = ctypes.CDLL(None, use_errno=True)
def err(r):
    return "ok" if r == 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
out = {"ptrace": err(libc.ptrace(16, 1, None, None)), "unshare": err(libc.unshare(0x20000)),
       "umount2": err(libc.umount2(b"/proc", 2)), "keyctl": err(libc.syscall(250, 0, 0, 0, 0, 0)),
       "fork": "ok" if os.fork() or os._exit(0) else "?", "open": "ok" if open("/proc/self/status").read() else "?"}
import jax.numpy as jnp
out["jax"] = float(jnp.ones(3).sum())
print(json.dumps(out))
"""


@pytest.mark.unit
def test_the_filter_is_classic_bpf_for_this_machine():
    prog = seccomp.filter_program("x86_64")
    # arch check (4), the x32 refusal (2), one comparison per denied call, allow and EPERM returns (2)
    assert len(prog) % 8 == 0 and len(prog) // 8 == 4 + 2 + len(seccomp.DENIED) + 2
    assert seccomp.filter_program("riscv64") is None
    assert len(seccomp.filter_program("aarch64")) // 8 == 4 + len(seccomp.DENIED) - 2 + 2  # no iopl/ioperm there


@pytest.mark.skipif(seccomp.filter_program() is None, reason="no syscall table for this machine")
def test_denied_calls_fail_with_eperm_and_a_job_still_runs(tmp_path):
    assert isolation_mode() == "bwrap"
    fd = seccomp.filter_fd()
    try:
        cmd = _bwrap_prefix(tmp_path, fd) + [sys.executable, "-c", PROBE]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, pass_fds=(fd,), cwd=tmp_path,
                           env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu", "HOME": str(tmp_path)})
    finally:
        import os

        os.close(fd)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"ptrace": "EPERM", "unshare": "EPERM", "umount2": "EPERM", "keyctl": "EPERM", "fork": "ok",
                   "open": "ok", "jax": 3.0}
