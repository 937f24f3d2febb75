"""rw_mhc_stream_mixing: manifold-constrained hyper-connections around one sublayer, from the mHC paper's equations
(Xie et al. 2025, arXiv 2512.24880, sec. 4.2, eqs. 7-8 and the Sinkhorn-Knopp projection) written per token with
explicit loops: x' = RMSNorm(vec(x_l)) over all n*C values (gain folded into phi, eps inside the root),
H~ = alpha * (x' phi) + b for each of pre / post / res, H_pre = sigmoid(H~_pre), H_post = 2 sigmoid(H~_post),
H_res = Sinkhorn-Knopp(exp(H~_res)) with hc_sinkhorn_iters = 20 rounds of dividing every column by its sum and
then every row by its sum, scalar loops over the n x n entries; then layer_input = sum_i H_pre[i] x_i and
x_{l+1}[i] = sum_j H_res[i, j] x_j + H_post[i] F. The paper normalises the input before projecting (the baseline
divides the projection's output), and the column-then-row order of one round is the task's stated convention."""

import numpy as np

SINKHORN_ITERS = 20  # hc_sinkhorn_iters of DeepSeek-V4-Pro's config (the paper's t_max)
NORM_EPS = 1e-6  # rms_norm_eps

BREAKS = (
    "the Sinkhorn row normalisation dropped (columns only)",
    "H_post's factor 2 dropped (sigmoid, not 2 sigmoid)",
    "the RMS normalisation of the widened residual dropped",
    "H_res applied transposed (stream i reads sum_j H_res[j, i] x_j)",
)


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _sinkhorn(logits):
    n = logits.shape[0]
    m = np.exp(logits)
    for _ in range(SINKHORN_ITERS):
        for j in range(n):  # columns sum to 1
            total = sum(m[i, j] for i in range(n))
            for i in range(n):
                m[i, j] /= total
        for i in range(n):  # rows sum to 1
            total = sum(m[i, j] for j in range(n))
            for j in range(n):
                m[i, j] /= total
    return m


def reference(streams, layer_out, phi, alpha, bias, *, config):
    tokens, n, c = streams.shape
    phi_pre, phi_post, phi_res = phi[:, :n], phi[:, n:2 * n], phi[:, 2 * n:]
    b_pre, b_post, b_res = bias[:n], bias[n:2 * n], bias[2 * n:].reshape(n, n)
    layer_input = np.zeros((tokens, c))
    new_streams = np.zeros((tokens, n, c))
    for t in range(tokens):
        x = streams[t]  # [n, C]
        v = x.reshape(n * c)
        xn = v / np.sqrt(np.mean(v * v) + NORM_EPS)  # RMSNorm(vec(x_l))
        h_pre = _sigmoid(alpha[0] * (xn @ phi_pre) + b_pre)
        h_post = 2.0 * _sigmoid(alpha[1] * (xn @ phi_post) + b_post)
        h_res = _sinkhorn(alpha[2] * (xn @ phi_res).reshape(n, n) + b_res)
        for i in range(n):
            layer_input[t] += h_pre[i] * x[i]
            new_streams[t, i] = h_post[i] * layer_out[t]
            for j in range(n):
                new_streams[t, i] += h_res[i, j] * x[j]
    return layer_input, new_streams
