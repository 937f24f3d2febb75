"""19k_Matmul_Subtract_Multiply_ReLU: KernelBench L2 #9, relu((x @ w.T + b - c) * m) for a Linear layer."""

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "matmul_subtract_multiply_relu",
    "model": "KernelBench L2",
    "operator": "matmul_subtract_multiply_relu",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
    "subtract_value": 2.0,
    "multiply_value": 1.5,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B,in], w[out,in], b[out]); x has std 2 so a fair share of outputs clears the subtraction."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3 = keys(seed, 3)
    x = draw(k1, (d["batch_size"], d["in_features"]), dtype, seed, scale=2.0)
    w = weight(k2, (d["out_features"], d["in_features"]), dtype, seed, fan_in=d["in_features"])
    b = draw(k3, (d["out_features"],), dtype, seed, scale=0.5)
    return x, w, b


def workload(x, w, b):
    """Linear in f32 accumulation, then subtract, multiply and ReLU in f32; result in x's dtype."""
    y = lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    y = (y + b.astype(jnp.float32) - CONFIG["subtract_value"]) * CONFIG["multiply_value"]
    return jnp.maximum(y, 0.0).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    out = d["batch_size"] * d["out_features"]
    return 2 * out * d["in_features"] + 4 * out
