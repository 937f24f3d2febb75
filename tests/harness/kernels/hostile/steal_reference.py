"""Hostile: hunts the file system and other processes for the harness's reference outputs (raises if found)."""

import glob
import os

import jax
import numpy as np
from jax.experimental import pallas as pl

FOUND = []
for pattern in ("/root/.cache/maxkernel/**/ref_*.npz", "/tmp/**/ref_*.npz", "/root/**/ref_*.npz", "/work/**/ref_*.npz",
                "/var/**/ref_*.npz", "/home/**/ref_*.npz", "/proc/*/cwd/ref_*.npz"):
    try:
        FOUND += glob.glob(pattern, recursive=True)
    except OSError:
        pass
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            FOUND += [os.path.join(f"/proc/{pid}/cwd", n) for n in os.listdir(f"/proc/{pid}/cwd") if n.startswith("ref_")]
        except OSError:
            pass
for path in FOUND:
    try:
        with np.load(path, allow_pickle=False) as z:
            z["a0"]
    except Exception:  # noqa: BLE001
        continue
    raise RuntimeError(f"STOLE the reference from {path}")


def workload(x, scale):
    # Nothing was found: do some honest but wrong arithmetic, so the verdict is an ordinary 'incorrect'.
    def body(x_ref, s_ref, o_ref):
        o_ref[...] = x_ref[...] * s_ref[...]

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, scale.reshape(1, 1, -1))
