"""Comparing a candidate's outputs with the reference: the error measure and the reference computation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Mismatch", "compare", "errors", "fro_tolerance", "rel_error", "reference_outputs", "upcast",
           "FRO_FACTOR", "FRO_FLOOR"]

# A kernel may land a small factor further from the f32 reference than XLA's own program does, not 10x further:
# measured on the smoke GEMM (bf16), XLA lands at 1.7e-3 relative Frobenius error and an int8-quantised GEMM at
# 5.8e-3 (normal inputs) to 2.2e-2 (heavy tails), while its max-normalised error (0.015) passes the 0.02 bound.
FRO_FACTOR = 2.5
# Below these the calibration is rounding noise (accumulation order), not precision: honest f32 kernels differ
# from XLA by ~3e-7 in sum order alone.
FRO_FLOOR = {"float64": 1e-12, "float32": 2e-5, "bfloat16": 3e-3, "float16": 1e-3}


@dataclass(frozen=True)
class Mismatch:
    """How one output leaf compares with its reference."""

    index: int  # position of the leaf in the flattened output
    ok: bool
    rel_err: float  # max|out - ref| / max|ref|; inf for NaN/Inf, shape or dtype mismatch
    tolerance: float
    fro_err: float = float("inf")  # ||out - ref|| / ||ref|| (Frobenius)
    fro_tolerance: float | None = None  # calibrated from the baseline's own error
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


def fro_error(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64 (0 when both are zero, inf when only ref is)."""
    o, r = _as_f64(out), _as_f64(ref)
    if o.shape != r.shape or not np.all(np.isfinite(o)):
        return float("inf")
    num, den = float(np.linalg.norm((o - r).ravel())), float(np.linalg.norm(r.ravel()))
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def errors(out, ref) -> dict:
    """Both error norms of `out` against `ref`: {"max": max-normalised, "fro": relative Frobenius}."""
    return {"max": rel_error(out, ref), "fro": fro_error(out, ref)}


def fro_tolerance(dtype_name: str, baseline_fro: float | None) -> float | None:
    """The Frobenius bound for one output: FRO_FACTOR times XLA's own error, never below the dtype's floor."""
    floor = FRO_FLOOR.get(dtype_name)
    if baseline_fro is None or floor is None or not np.isfinite(baseline_fro):
        return floor
    return max(FRO_FACTOR * baseline_fro, floor)


def compare(index: int, out, ref, expected_dtype: str, tolerance: float, fro_tol: float | None = None) -> Mismatch:
    """Judge one output leaf: exact shape and dtype, all finite, both error norms within their bounds."""
    o, r = np.asarray(out), np.asarray(ref)
    got = str(o.dtype)
    if o.shape != r.shape:
        return Mismatch(index, False, float("inf"), tolerance, reason=f"output {index}: shape {o.shape}, expected {r.shape}")
    if got != expected_dtype:
        return Mismatch(index, False, float("inf"), tolerance,
                        reason=f"output {index}: dtype {got}, expected {expected_dtype}")
    of, rf = _as_f64(o), _as_f64(r)
    nonfinite = ~np.isfinite(of)
    if nonfinite.any():
        where = tuple(int(i) for i in np.argwhere(nonfinite)[0])
        return Mismatch(index, False, float("inf"), tolerance, fro_tolerance=fro_tol,
                        reason=f"output {index}: {int(nonfinite.sum())} NaN/Inf values, first at {where}",
                        bad_elements=int(nonfinite.sum()), worst_index=where, worst_out=float(of[where]),
                        worst_ref=float(rf[where]))
    err = rel_error(of, rf)
    diff = np.abs(of - rf)
    scale = float(np.max(np.abs(rf))) if rf.size else 0.0
    bad = int(np.sum(diff > tolerance * scale)) if rf.size else 0
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape)) if rf.size else ()
    fro = fro_error(of, rf)
    ok = err <= tolerance and (fro_tol is None or fro <= fro_tol)
    if err > tolerance:
        reason = (f"output {index}: error {err:.3g} of max|ref| exceeds tolerance {tolerance:.3g}; "
                  f"{bad} of {rf.size} elements off, worst at {where}")
    elif not ok:
        reason = (f"output {index}: relative Frobenius error {fro:.3g} exceeds {fro_tol:.3g} ({FRO_FACTOR:g}x XLA's "
                  f"own error against the f32 reference): the kernel loses precision the task does not allow")
    else:
        reason = ""
    return Mismatch(index, ok, err, tolerance, fro, fro_tol, reason, bad, where,
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
