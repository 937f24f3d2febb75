"""rw_fp8_matmul: an fp8 (e4m3) matmul with per-channel f32 scales on the DeepSeek-V3 dense FFN up-projection;
shapes from deepseek-ai/DeepSeek-V3's config.json (hidden_size 7168, intermediate_size 18432)."""

from functools import partial

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "deepseek_v3_fp8_matmul",
    "model": "DeepSeek-V3",
    "operator": "fp8_matmul",
    "M": 4096,  # tokens: one 4096-token sequence (DeepSeek-V3's pre-training sequence length) in prefill
    "K": 7168,  # hidden_size
    # intermediate_size: the gate/up width of the dense FFN in the first 3 layers (the routed experts' is
    # moe_intermediate_size, 2048).
    "N": 18432,
}
SIZES = {"smoke": {"M": 256, "K": 512, "N": 384}}
# prefill: a whole prompt's tokens at once; decode: one new token for each of 16 sequences in a serving batch.
CONFIGS = {"prefill": {}, "decode": {"M": 16}}

# Scales are per channel (one per row of x, one per column of w). DeepSeek-V3's own fp8 recipe scales finer
# (1x128 activation tiles, 128x128 weight blocks); the per-channel form is the common serving one.
# Largest finite float8_e4m3fn value: each row of x and column of w is scaled so its largest magnitude lands here.
FP8_MAX = 448.0
MIN_SCALE = 1e-10  # the scale of an all-zero row or column

# Independent dimensions (rows and columns of the output are independent): the TPU estimator may shrink these and
# extrapolate.
PARALLEL_DIMS = ("M", "N")


@partial(jax.jit, static_argnames="axis")  # one program, not an op-by-op compile per step for each new seed
def _quantize(a, axis):
    """a (f32) as float8_e4m3fn codes with one f32 scale per slice along `axis` (scale = max|slice| / 448)."""
    scale = jnp.maximum(jnp.max(jnp.abs(a), axis=axis, keepdims=True) / FP8_MAX, MIN_SCALE)
    return jnp.clip(a / scale, -FP8_MAX, FP8_MAX).astype(jnp.float8_e4m3fn), scale


def create_inputs(dtype=jnp.float8_e4m3fn, *, size="full", seed=42):
    """Returns (x[M, K] in `dtype`, x_scale[M, 1] f32, w[K, N] in `dtype`, w_scale[1, N] f32): activations and a
    1/sqrt(K)-scaled weight drawn in f32 from the seed's distribution, then quantized per row (x) and per
    column (w) to fp8, so x * x_scale and w * w_scale approximate them and outputs are O(1)."""
    d = dims(CONFIG, SIZES, size, CONFIGS)
    kx, kw = keys(seed, 2)
    x, x_scale = _quantize(draw(kx, (d["M"], d["K"]), jnp.float32, seed), axis=1)
    w, w_scale = _quantize(weight(kw, (d["K"], d["N"]), jnp.float32, seed), axis=0)
    return x.astype(dtype), x_scale, w.astype(dtype), w_scale


def workload(x, x_scale, w, w_scale):
    """(x @ w) accumulated in f32, times x_scale per row and w_scale per column, returned in bf16.
    The output is bf16 whatever the operands' dtype: the harness's reference (operands widened to f32, which
    holds every fp8 value exactly) differs from the fp8 run only in summation order."""
    acc = jnp.matmul(x, w, preferred_element_type=jnp.float32)
    return (acc * x_scale * w_scale).astype(jnp.bfloat16)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size, CONFIGS)
    # The matmul plus the two scale multiplies per output.
    return 2 * d["M"] * d["K"] * d["N"] + 2 * d["M"] * d["N"]
