"""rw_rglru_scan: the RecurrentGemma-9B (Griffin) RG-LRU, block-diagonal input and recurrence gates and the gated
linear recurrence scanned over time in f32, prefill and one-step decode; shapes from google-deepmind/recurrentgemma's
RECURRENT_GEMMA_9B_V1 preset (lru_width 4096, num_heads 16: the gates' diagonal blocks)."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "recurrentgemma_9b_rglru_scan",
    "model": "RecurrentGemma-9B",
    "operator": "rglru_scan",
    "batch": 4,
    "seq_len": 4096,
    "num_heads": 16,  # diagonal blocks of the two gate layers
    "head_width": 256,  # lru_width 4096 / num_heads 16
    "c": 8.0,  # a_t = a^(c r_t)
}
SIZES = {"smoke": {"batch": 2, "seq_len": 128, "num_heads": 2, "head_width": 256}}
# Prefill scans a prompt chunk; decode takes one step per sequence of a serving batch.
CONFIGS = {"prefill": {}, "decode": {"seq_len": 1, "batch": 128}}

# Independent dimensions (sequences, and the channel blocks: each block's gates read only its own channels): the TPU
# estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("batch", "num_heads")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x [batch, seq_len, lru_width], h_prev [batch, lru_width] float32, w_a, w_x [num_heads, head_width,
    head_width], b_a, b_x [num_heads, head_width], lam [lru_width]) with lru_width = num_heads * head_width.

    h_prev is the recurrent state left by the previous tokens, float32 whatever `dtype` is (RecurrentGemma keeps its
    RG-LRU cache in f32). lam is Lambda with a = sigmoid(Lambda) drawn around 0.99 (Lambda near 4.5), within and
    around the model's initial ring a in [0.9, 0.999]."""
    d = dims(CONFIG, SIZES, size, CONFIGS)
    b, s, h, bw = d["batch"], d["seq_len"], d["num_heads"], d["head_width"]
    width = h * bw
    kx, kh, kwa, kwx, kba, kbx, kl = keys(seed, 7)
    x = draw(kx, (b, s, width), dtype, seed)
    h_prev = draw(kh, (b, width), jnp.float32, seed, scale=0.5)  # about the state's steady-state spread
    w_a = weight(kwa, (h, bw, bw), dtype, seed, fan_in=bw)
    w_x = weight(kwx, (h, bw, bw), dtype, seed, fan_in=bw)
    b_a = draw(kba, (h, bw), dtype, seed, scale=0.5)
    b_x = draw(kbx, (h, bw), dtype, seed, scale=0.5)
    lam = draw(kl, (width,), dtype, seed, shift=4.5)
    return x, h_prev, w_a, w_x, b_a, b_x, lam


def workload(x, h_prev, w_a, w_x, b_a, b_x, lam):
    """r_t = sigmoid(x_t W_a + b_a), i_t = sigmoid(x_t W_x + b_x) (block-diagonal: channel block n only reads block
    n), log a_t = c r_t log sigmoid(Lambda), h_t = a_t h_{t-1} + sqrt(1 - a_t^2) (i_t x_t) from h_prev; returns
    (y = h_1..h_T [batch, seq_len, lru_width] in x's dtype, h_T [batch, lru_width] float32).

    The gate matmuls take the input-dtype operands with f32 accumulation; gates, decays and the lax.scan over time
    are f32."""
    b, s, width = x.shape
    h, bw = w_a.shape[0], w_a.shape[1]
    xb = x.reshape(b, s, h, bw)

    def gate(w, bias):  # -> [seq, batch, lru_width], time-major for the scan
        # The block index leads the product's output (dot_general's batch-first order; XLA:CPU runs no other
        # bf16 x bf16 -> f32 layout of this product).
        z = jnp.einsum("bshi,hij->hbsj", xb, w, preferred_element_type=jnp.float32)
        z = z + bias.astype(jnp.float32)[:, None, None, :]
        return jax.nn.sigmoid(jnp.transpose(z, (2, 1, 0, 3)).reshape(s, b, width))

    r, i = gate(w_a, b_a), gate(w_x, b_x)
    # log a = log sigmoid(Lambda) = -softplus(-Lambda); a_t = exp(c r_t log a) stays in (0, 1].
    log_a = -CONFIG["c"] * r * jax.nn.softplus(-lam.astype(jnp.float32))
    a = jnp.exp(log_a)
    # sqrt(1 - a^2) = sqrt(-expm1(2 log a)): accurate when a_t is close to 1.
    u = jnp.sqrt(-jnp.expm1(2.0 * log_a)) * (i * jnp.swapaxes(x, 0, 1).astype(jnp.float32))

    def step(hidden, au):
        a_t, u_t = au
        hidden = a_t * hidden + u_t
        return hidden, hidden

    last, ys = lax.scan(step, h_prev.astype(jnp.float32), (a, u))
    return jnp.swapaxes(ys, 0, 1).astype(x.dtype), last


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size, CONFIGS)
    tokens = d["batch"] * d["seq_len"]
    width = d["num_heads"] * d["head_width"]
    gates = 2 * 2 * tokens * width * d["head_width"]  # two block-diagonal matmuls
    # Per channel and step: the exponent's two multiplies, gating i x and its scale, the recurrence's multiply-add
    # (sigmoids, exp, expm1 and sqrt not counted).
    return gates + 6 * tokens * width
