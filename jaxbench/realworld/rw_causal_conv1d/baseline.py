"""rw_causal_conv1d: the Mamba-2-2.7B causal depthwise conv1d (width 4, bias, SiLU) over the xBC channels, prefill and
one-token decode with its rolling conv state; shapes from state-spaces/mamba2-2.7b's config.json (d_model 2560, with
the Mamba2 layer's defaults expand 2, ngroups 1, d_state 128, d_conv 4, conv_bias True)."""

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "mamba2_2_7b_causal_conv1d",
    "model": "Mamba-2-2.7B",
    "operator": "causal_conv1d",
    "batch": 4,
    "seq_len": 4096,
    "conv_dim": 5376,  # d_inner + 2 * ngroups * d_state = 2 * 2560 + 2 * 1 * 128: the x, B and C channels
    "conv_width": 4,  # d_conv
}
# 384 = 3 * 128 keeps the channel count a lane multiple, like 5376 = 42 * 128.
SIZES = {"smoke": {"batch": 2, "seq_len": 256, "conv_dim": 384}}
# Prefill runs a whole prompt chunk; decode one new token per sequence of a serving batch.
CONFIGS = {"prefill": {}, "decode": {"seq_len": 1, "batch": 128}}

# Independent dimensions (sequences and channels are convolved separately): the TPU estimator may shrink these and
# extrapolate.
PARALLEL_DIMS = ("batch", "conv_dim")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x [batch, seq_len, conv_dim], conv_state [batch, conv_width - 1, conv_dim] the inputs of the
    conv_width - 1 positions before x (oldest first), conv_weight [conv_dim, conv_width] (last tap on the newest
    input), bias [conv_dim])."""
    d = dims(CONFIG, SIZES, size, CONFIGS)
    b, s, c, w = d["batch"], d["seq_len"], d["conv_dim"], d["conv_width"]
    kx, ks, kw, kb = keys(seed, 4)
    x = draw(kx, (b, s, c), dtype, seed)
    state = draw(ks, (b, w - 1, c), dtype, seed)
    wt = weight(kw, (c, w), dtype, seed, fan_in=w)  # PyTorch's depthwise fan-in: the width taps of one channel
    bias = draw(kb, (c,), dtype, seed, scale=0.5)
    return x, state, wt, bias


def workload(x, conv_state, conv_weight, bias):
    """y_t = silu(bias + sum_j conv_weight[:, j] * u_{t - (W-1) + j}) over u = [conv_state, x] along the sequence, so
    the first outputs read the carried state; returns (y [batch, seq_len, conv_dim], the new conv state = the last
    conv_width - 1 rows of u), in x's dtype. Products, sums and the SiLU in f32.

    Prefill (a prompt chunk continuing from a state; a fresh prompt has a zero state) and decode (seq_len 1: one
    token, the state shifted by one) are the same computation."""
    width = conv_weight.shape[1]
    s = x.shape[1]
    u = jnp.concatenate([conv_state, x], axis=1)  # [batch, W - 1 + seq, conv_dim]
    uf = u.astype(jnp.float32)
    wf = conv_weight.astype(jnp.float32)
    acc = bias.astype(jnp.float32)
    for j in range(width):
        acc = acc + uf[:, j:j + s] * wf[:, j]
    y = acc * jax.nn.sigmoid(acc)
    return y.astype(x.dtype), u[:, s:]


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size, CONFIGS)
    # Per output: conv_width multiply-adds, the bias, and SiLU's multiply (its sigmoid not counted).
    return d["batch"] * d["seq_len"] * d["conv_dim"] * (2 * d["conv_width"] + 2)
