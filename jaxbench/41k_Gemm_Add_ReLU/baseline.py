"""41k_Gemm_Add_ReLU: KernelBench L2 #76, relu(x @ W^T + bias) with a bias-free Linear and a separate bias parameter."""

import jax.numpy as jnp

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "gemm_add_relu",
    "model": "KernelBench L2",
    "operator": "gemm_add_relu",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[batch_size, in_features], w[out_features, in_features] (torch Linear layout), bias[out_features])."""
    d = dims(CONFIG, SIZES, size)
    kx, kw, kb = keys(seed, 3)
    x = draw(kx, (d["batch_size"], d["in_features"]), dtype, seed)
    w = weight(kw, (d["out_features"], d["in_features"]), dtype, seed, fan_in=d["in_features"])
    # A bias comparable to the matmul output moves the ReLU threshold per feature.
    bias = draw(kb, (d["out_features"],), dtype, seed, scale=0.5)
    return x, w, bias


def workload(x, w, bias):
    """relu(x @ w.T + bias): f32 accumulation and epilogue, result in x's dtype."""
    y = jnp.einsum("bi,oi->bo", x, w, preferred_element_type=jnp.float32)
    y = y + bias.astype(jnp.float32)
    return jnp.maximum(y, 0.0).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    b, i, o = d["batch_size"], d["in_features"], d["out_features"]
    return 2 * b * i * o + 2 * b * o
