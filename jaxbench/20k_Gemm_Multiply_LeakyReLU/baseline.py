"""20k_Gemm_Multiply_LeakyReLU: KernelBench L2 #12, leaky_relu((x @ w.T + b) * multiplier) for a Linear layer."""

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "gemm_multiply_leakyrelu",
    "model": "KernelBench L2",
    "operator": "gemm_multiply_leakyrelu",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
    "multiplier": 2.0,
    "negative_slope": 0.1,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B,in], w[out,in], b[out])."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3 = keys(seed, 3)
    x = draw(k1, (d["batch_size"], d["in_features"]), dtype, seed)
    w = weight(k2, (d["out_features"], d["in_features"]), dtype, seed, fan_in=d["in_features"])
    b = draw(k3, (d["out_features"],), dtype, seed, scale=0.5)
    return x, w, b


def workload(x, w, b):
    """Linear in f32 accumulation, then scale and LeakyReLU in f32; result in x's dtype."""
    y = lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    y = (y + b.astype(jnp.float32)) * CONFIG["multiplier"]
    return jnp.where(y >= 0, y, CONFIG["negative_slope"] * y).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    out = d["batch_size"] * d["out_features"]
    return 2 * out * d["in_features"] + 4 * out
