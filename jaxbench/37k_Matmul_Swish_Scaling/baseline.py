"""37k_Matmul_Swish_Scaling: KernelBench L2 #59, scaling_factor * swish(x @ W^T + b)."""

import math

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "matmul_swish_scaling",
    "model": "KernelBench L2",
    "operator": "matmul_swish_scaling",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
    "scaling_factor": 2.0,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}

# Std of the Linear output: wide enough to cover the curved part of swish on both sides.
GEMM_SCALE = 2.0


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[batch_size, in_features], w[out_features, in_features] (torch Linear layout), b[out_features])."""
    d = dims(CONFIG, SIZES, size)
    kx, kw, kb = keys(seed, 3)
    x = draw(kx, (d["batch_size"], d["in_features"]), dtype, seed)
    w = draw(kw, (d["out_features"], d["in_features"]), dtype, seed, scale=GEMM_SCALE / math.sqrt(d["in_features"]))
    b = draw(kb, (d["out_features"],), dtype, seed, scale=0.5)
    return x, w, b


def workload(x, w, b):
    """Linear with f32 accumulation; swish (z * sigmoid(z)) and scaling in f32; result in x's dtype."""
    z = jnp.einsum("bi,oi->bo", x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)
    return (z * jax.nn.sigmoid(z) * CONFIG["scaling_factor"]).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    bsz, i, o = d["batch_size"], d["in_features"], d["out_features"]
    # matmul + bias, ~4 for sigmoid, the product and the scale per output.
    return 2 * bsz * i * o + bsz * o * (1 + 4 + 2)
