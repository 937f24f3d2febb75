"""rw_w8a8_int8_matmul: a W8A8 int8 matmul (activations quantized per token inside the op, int8 weights with
per-output-channel scales) on the Llama-3.1-70B MLP up-projection; shapes from meta-llama/Llama-3.1-70B's
config.json (hidden_size 8192, intermediate_size 28672)."""

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "llama3_70b_w8a8_int8_matmul",
    "model": "Llama-3.1-70B",
    "operator": "w8a8_int8_matmul",
    "M": 8192,  # tokens: one 8192-token prompt (Llama 3's pre-training context length) in prefill
    "K": 8192,  # hidden_size
    "N": 28672,  # intermediate_size (the gate/up projection's output width)
}
SIZES = {"smoke": {"M": 256, "K": 512, "N": 384}}
# prefill: a whole prompt's tokens at once; decode: one new token for each of 16 sequences in a serving batch.
CONFIGS = {"prefill": {}, "decode": {"M": 16}}

# Symmetric int8 range: -127..127, so that +x and -x quantize to opposite codes (-128 is never produced).
QMAX = 127.0
# A row of all zeros gets this scale instead of 0 (its codes are then all 0 and its outputs exactly 0).
MIN_SCALE = 1e-10

# Independent dimensions (rows are quantized and multiplied independently, columns have their own scales): the TPU
# estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("M", "N")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[M, K] in `dtype`, w[K, N] int8, w_scale[1, N] f32): the weights are a drawn float matrix
    quantized offline per output column (scale = max|column| / 127, codes round(w / scale) in -127..127), so
    their codes follow the seed's distribution and w * w_scale approximates a 1/sqrt(K)-scaled weight."""
    d = dims(CONFIG, SIZES, size, CONFIGS)
    kx, kw = keys(seed, 2)
    x = draw(kx, (d["M"], d["K"]), dtype, seed)
    w, w_scale = _quantize_columns(weight(kw, (d["K"], d["N"]), jnp.float32, seed))
    return x, w, w_scale


@jax.jit  # one program, not an op-by-op compile per step for each new seed
def _quantize_columns(w_float):
    """int8 codes of w_float and its per-column f32 scales [1, N]."""
    w_scale = jnp.maximum(jnp.max(jnp.abs(w_float), axis=0, keepdims=True) / QMAX, MIN_SCALE)
    return jnp.clip(jnp.round(w_float / w_scale), -QMAX, QMAX).astype(jnp.int8), w_scale


def workload(x, w, w_scale):
    """Dynamic per-token quantization of x (in f32: scale = max|row| / 127, codes round-half-to-even(x / scale)
    clipped to -127..127), int8 x int8 matmul accumulated exactly in int32, then acc * x_scale * w_scale in f32,
    returned in x's dtype."""
    xf = x.astype(jnp.float32)
    x_scale = jnp.maximum(jnp.max(jnp.abs(xf), axis=1, keepdims=True) / QMAX, MIN_SCALE)  # [M, 1]
    xq = jnp.clip(jnp.round(xf / x_scale), -QMAX, QMAX).astype(jnp.int8)
    acc = jnp.matmul(xq, w, preferred_element_type=jnp.int32)  # |acc| <= 127 * 127 * K: no int32 overflow
    return (acc.astype(jnp.float32) * x_scale * w_scale).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size, CONFIGS)
    # The int8 matmul, plus quantizing x (abs, max, divide per element) and dequantizing (two multiplies per output).
    return 2 * d["M"] * d["K"] * d["N"] + 3 * d["M"] * d["K"] + 2 * d["M"] * d["N"]
