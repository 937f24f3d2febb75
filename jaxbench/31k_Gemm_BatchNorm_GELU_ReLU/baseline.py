"""31k_Gemm_BatchNorm_GELU_ReLU: KernelBench L2 #41, Linear, BatchNorm1d (batch statistics), exact GELU, ReLU."""

import jax.numpy as jnp
from jax import lax
from jax.scipy.special import erf

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "gemm_batchnorm_gelu_relu",
    "model": "KernelBench L2",
    "operator": "gemm_batchnorm_gelu_relu",
    "batch_size": 16384,
    "in_features": 8192,
    "out_features": 8192,
    "eps": 1e-5,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B,in], w[out,in], b[out], bn_w[out], bn_b[out])."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3, k4, k5 = keys(seed, 5)
    x = draw(k1, (d["batch_size"], d["in_features"]), dtype, seed)
    w = weight(k2, (d["out_features"], d["in_features"]), dtype, seed, fan_in=d["in_features"])
    b = draw(k3, (d["out_features"],), dtype, seed, scale=0.5)
    bn_w = draw(k4, (d["out_features"],), dtype, seed, scale=0.5, shift=1.0)
    bn_b = draw(k5, (d["out_features"],), dtype, seed, scale=0.5)
    return x, w, b, bn_w, bn_b


def workload(x, w, b, bn_w, bn_b):
    """BatchNorm in its training form, as KernelBench runs the module: each feature is normalised with the mean
    and biased variance over the batch (f32 stats), so the Linear bias cancels; no running statistics are used."""
    y = lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    y = y + b.astype(jnp.float32)
    mean = jnp.mean(y, axis=0, keepdims=True)
    var = jnp.mean(jnp.square(y - mean), axis=0, keepdims=True)
    y = (y - mean) * lax.rsqrt(var + CONFIG["eps"]) * bn_w.astype(jnp.float32) + bn_b.astype(jnp.float32)
    y = 0.5 * y * (1.0 + erf(y * 0.7071067811865476))
    return jnp.maximum(y, 0.0).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    out = d["batch_size"] * d["out_features"]
    return 2 * out * d["in_features"] + 16 * out
