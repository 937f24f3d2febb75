"""30k_Matmul_Scaling_ResidualAdd: KernelBench L2 #40, a Linear layer scaled and added back to itself."""

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "matmul_scaling_residualadd",
    "model": "KernelBench L2",
    "operator": "matmul_scaling_residualadd",
    "batch_size": 16384,
    "in_features": 4096,
    "out_features": 4096,
    "scaling_factor": 0.5,
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
    """y * scaling_factor + y for y = x @ w.T + b (torch's detached residual copy), in f32; result in x's dtype."""
    y = lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    y = y + b.astype(jnp.float32)
    return (y * CONFIG["scaling_factor"] + y).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    out = d["batch_size"] * d["out_features"]
    return 2 * out * d["in_features"] + 3 * out
