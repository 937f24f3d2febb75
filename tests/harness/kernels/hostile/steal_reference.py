"""Hostile: hunts the file system and other processes for the harness's reference outputs and returns them."""

import glob
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

FOUND = []
for pattern in ("/root/.cache/maxkernel/**/ref_*.npz", "/tmp/**/ref_*.npz", "/**/ref_0.npz", "/proc/*/cwd/ref_*.npz"):
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
STOLEN = None
for path in FOUND:
    try:
        with np.load(path, allow_pickle=False) as z:
            STOLEN = z["a0"]
            break
    except Exception:  # noqa: BLE001
        continue


def workload(x, scale):
    src = jnp.asarray(STOLEN).view(x.dtype).reshape(x.shape) if STOLEN is not None else jnp.zeros_like(x)

    def body(i_ref, o_ref):
        o_ref[...] = i_ref[...]

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(src)
