"""Comparing a candidate's outputs with the reference: the error measure and the reference computation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Mismatch", "compare", "rel_error", "reference_outputs", "upcast"]


@dataclass(frozen=True)
class Mismatch:
    """How one output leaf compares with its reference."""

    index: int  # position of the leaf in the flattened output
    ok: bool
    rel_err: float  # max|out - ref| / max|ref|; inf for NaN/Inf, shape or dtype mismatch
    tolerance: float
    reason: str = ""  # why it failed, in words
    bad_elements: int = 0  # elements whose error exceeds tolerance * max|ref|
    worst_index: tuple = ()  # location of the largest error
    worst_out: float = 0.0
    worst_ref: float = 0.0


def _as_f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def rel_error(out, ref) -> float:
    """max|out - ref| / max|ref| in float64; inf when shapes differ or `out` holds NaN/Inf."""
    o, r = _as_f64(out), _as_f64(ref)
    if o.shape != r.shape or not np.all(np.isfinite(o)):
        return float("inf")
    scale = float(np.max(np.abs(r))) if r.size else 0.0
    err = float(np.max(np.abs(o - r))) if r.size else 0.0
    return err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))


def compare(index: int, out, ref, expected_dtype: str, tolerance: float) -> Mismatch:
    """Judge one output leaf: exact shape and dtype, all finite, scaled error within tolerance."""
    o, r = np.asarray(out), np.asarray(ref)
    got = str(o.dtype)
    if o.shape != r.shape:
        return Mismatch(index, False, float("inf"), tolerance, f"output {index}: shape {o.shape}, expected {r.shape}")
    if got != expected_dtype:
        return Mismatch(index, False, float("inf"), tolerance, f"output {index}: dtype {got}, expected {expected_dtype}")
    of, rf = _as_f64(o), _as_f64(r)
    nonfinite = ~np.isfinite(of)
    if nonfinite.any():
        where = tuple(int(i) for i in np.argwhere(nonfinite)[0])
        return Mismatch(index, False, float("inf"), tolerance,
                        f"output {index}: {int(nonfinite.sum())} NaN/Inf values, first at {where}",
                        int(nonfinite.sum()), where, float(of[where]), float(rf[where]))
    err = rel_error(of, rf)
    diff = np.abs(of - rf)
    scale = float(np.max(np.abs(rf))) if rf.size else 0.0
    bad = int(np.sum(diff > tolerance * scale)) if rf.size else 0
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape)) if rf.size else ()
    ok = err <= tolerance
    reason = "" if ok else (f"output {index}: error {err:.3g} of max|ref| exceeds tolerance {tolerance:.3g}; "
                            f"{bad} of {rf.size} elements off, worst at {where}")
    return Mismatch(index, ok, err, tolerance, reason, bad, where,
                    float(of[where]) if where else 0.0, float(rf[where]) if where else 0.0)


def upcast(inputs):
    """Floating inputs widened to float32 (from the same rounded values); other inputs unchanged."""
    import jax.numpy as jnp

    return tuple(x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != jnp.float64 else x
                 for x in inputs)


def reference_outputs(workload, inputs) -> list[np.ndarray]:
    """The task's workload on float32-widened inputs at highest matmul precision, as flat numpy leaves."""
    import jax

    with jax.default_matmul_precision("highest"):
        out = jax.jit(workload)(*upcast(inputs))
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(out)]
