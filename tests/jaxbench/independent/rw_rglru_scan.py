"""rw_rglru_scan: the RG-LRU of Griffin (De et al. 2024, arXiv 2402.19427, eqs. 1-4) as recurrentgemma's own
reference layer computes it, per token in a Python loop: r_t = sigmoid(W_a x_t + b_a), i_t = sigmoid(W_x x_t + b_x)
with block-diagonal W (block n reads channel block n), a_t = sigmoid(Lambda)^(c r_t) taken as a power (not
through softplus), h_t = a_t h_{t-1} + sqrt(1 - a_t^2) (i_t x_t), from h_prev; outputs h_1..h_T and h_T."""

import numpy as np

BREAKS = ("the sqrt(1 - a_t^2) input normalisation removed (u = i * x)", "c r_t replaced by r_t in the decay")


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def reference(x, h_prev, w_a, w_x, b_a, b_x, lam, *, config):
    batch, seq, width = x.shape
    heads, bw = w_a.shape[0], w_a.shape[1]
    a_base = _sigmoid(lam)  # a = sigmoid(Lambda), per channel
    h = h_prev.copy()
    ys = np.zeros((batch, seq, width))
    for t in range(seq):
        xt = x[:, t, :]
        r = np.empty_like(xt)
        i = np.empty_like(xt)
        for n in range(heads):  # block-diagonal gates
            block = slice(n * bw, (n + 1) * bw)
            r[:, block] = _sigmoid(xt[:, block] @ w_a[n] + b_a[n])
            i[:, block] = _sigmoid(xt[:, block] @ w_x[n] + b_x[n])
        a = a_base ** (config["c"] * r)
        h = a * h + np.sqrt(1.0 - a * a) * (i * xt)
        ys[:, t, :] = h
    return ys, h
