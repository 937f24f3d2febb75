"""rw_fp8_matmul: a per-channel-scaled fp8 (e4m3) matmul as its definition states it (the scaled_mm of
torch._scaled_mm / vLLM's Fp8LinearOp with per-token activation and per-channel weight scales): each operand is
dequantized first, X = x * x_scale (one scale per row) and W = w * w_scale (one per column), and the output is
X @ W, returned in bf16. Written dequantize-then-multiply in float64, with one row of the output per loop step,
instead of the baseline's fp8 matmul followed by the two scales applied to the f32 accumulator; the inputs are the
task's own fp8 codes (DTYPE None), which float64 holds exactly.

The output is bf16 by definition, so each element carries the rounding of a bf16 cast: at most half a bf16 ulp,
2^-8 of its own magnitude. `check` holds every element to that bound (plus a 1e-6 of max|ref| floor for the f32
accumulation that can push a value across a rounding midpoint), tighter than one tolerance over the whole output."""

import numpy as np

BREAKS = (
    "the weight's per-column scale dropped (acc * x_scale)",
    "the activation's per-row scale dropped (acc * w_scale)",
    "the output cast through fp8 e4m3 before bf16 (the result rounded to the operands' 3-bit mantissa)",
)

DTYPE = None  # keep the task's fp8 codes and f32 scales
TOLERANCE = 2.0**-8  # half a bf16 ulp, relative to each element's own magnitude
FLOOR = 1e-6  # of max|ref|: f32 accumulation error before the bf16 rounding


def reference(x, x_scale, w, w_scale, *, config):
    m, k = x.shape
    n = w.shape[1]
    assert (m, k, n) == (config["M"], config["K"], config["N"])
    assert x_scale.shape == (m, 1) and w_scale.shape == (1, n)
    w_deq = w * w_scale  # [K, N], each column times its scale
    out = np.zeros((m, n))
    for i in range(m):
        out[i] = (x[i] * x_scale[i, 0]) @ w_deq
    return out


def check(got, want, config):
    (g,), (w,) = got, want
    assert g.shape == w.shape, (g.shape, w.shape)
    bound = TOLERANCE * np.abs(w) + FLOOR * float(np.max(np.abs(w)))
    excess = np.abs(g - w) - bound
    worst = np.unravel_index(int(np.argmax(excess)), w.shape)
    assert excess[worst] <= 0, (f"element {tuple(int(i) for i in worst)}: got {g[worst]:.6g}, want {w[worst]:.6g}; "
                                f"error beyond bf16 rounding (2^-8 of |want|); {int(np.sum(excess > 0))} such elements")
