"""Saving and loading lists of arrays (bf16 included) without pickle, for passing data between processes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import ml_dtypes  # noqa: F401  (registers bfloat16 and friends with numpy)
import numpy as np

__all__ = ["save_arrays", "load_arrays"]

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:  # bfloat16, float8_* and other ml_dtypes types
        return np.dtype(getattr(ml_dtypes, name))


def save_arrays(path: Path, arrays) -> None:
    """Write `arrays` (a sequence) to `path` as a pickle-free .npz; dtypes travel by name."""
    arrays = [np.asarray(a) for a in arrays]
    names = [str(a.dtype) for a in arrays]
    payload = {f"a{i}": (a.view(_UINT[a.dtype.itemsize]) if names[i] not in np.sctypeDict else a)
               for i, a in enumerate(arrays)}
    payload["dtypes"] = np.frombuffer(json.dumps(names).encode(), dtype=np.uint8)
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **payload)
    tmp.replace(path)


def load_arrays(source) -> list[np.ndarray]:
    """Read what save_arrays wrote (a path, an open binary file, or the file's bytes); refuses pickled content."""
    with np.load(io.BytesIO(source) if isinstance(source, bytes) else source, allow_pickle=False) as z:
        names = json.loads(bytes(z["dtypes"]).decode())
        out = []
        for i, name in enumerate(names):
            a = z[f"a{i}"]
            dt = _dtype(name)
            out.append(a.view(dt) if a.dtype != dt else a)
    return out
