"""rw_w8a8_int8_matmul: a W8A8 int8 linear layer as SmoothQuant (Xiao et al. 2023, arXiv 2211.10438, per-token
dynamic activation quantization) and vLLM's dynamic per-token int8 path define it: each token's activations get
their own symmetric scale s_i = max_k |x_ik| / 127 taken at run time, codes q_ik = round(x_ik / s_i) clipped to
-127..127; the int8 weights carry one scale per output channel; y_ij = s_i * w_scale_j * sum_k q_ik w_kj with the
integer sum exact. Written token by token: each row is quantized on its own and its integer dot products taken in
int64, instead of the baseline's whole-matrix quantize and int32 matmul. The quantization itself is reproduced the
way the op rounds it (scale and x / scale in float32, round half to even), so the codes are the op's codes and the
comparison stays at float rounding; the rest is float64."""

import numpy as np

BREAKS = (
    "the activation's per-token scale dropped from the dequantization (acc * w_scale)",
    "the codes truncated toward zero instead of rounded (astype(int8) without round)",
    "the activation scale taken over the whole matrix instead of per token (max over both axes)",
)

QMAX = 127


def reference(x, w, w_scale, *, config):
    m, k = x.shape
    n = w.shape[1]
    assert (m, k, n) == (config["M"], config["K"], config["N"]) and w.dtype == np.int8 and w_scale.shape == (1, n)
    w64 = w.astype(np.int64)
    col_scale = w_scale[0]
    out = np.zeros((m, n))
    for i in range(m):
        row = x[i].astype(np.float32)  # the op quantizes in float32 (x is float32 here, so this is exact)
        amax = np.max(np.abs(row))
        s = max(np.float32(amax / np.float32(QMAX)), np.float32(1e-10))  # an all-zero row: codes 0, outputs 0
        codes = np.clip(np.rint(row / np.float32(s)), -QMAX, QMAX).astype(np.int64)  # rint: half to even
        acc = codes @ w64  # exact integer dot products, [N]
        out[i] = acc.astype(np.float64) * float(s) * col_scale
    return out
