"""26k_BMM_InstanceNorm_Sum_ResidualAdd_Multiply: KernelBench L2 #28, Linear, row InstanceNorm, (x + y) * y."""

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "bmm_instancenorm_sum_residualadd_multiply",
    "model": "KernelBench L2",
    "operator": "bmm_instancenorm_sum_residualadd_multiply",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
    "eps": 1e-5,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B,in], y[B,out], w[out,in], b[out])."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3, k4 = keys(seed, 4)
    x = draw(k1, (d["batch_size"], d["in_features"]), dtype, seed)
    y = draw(k2, (d["batch_size"], d["out_features"]), dtype, seed)
    w = weight(k3, (d["out_features"], d["in_features"]), dtype, seed, fan_in=d["in_features"])
    b = draw(k4, (d["out_features"],), dtype, seed, scale=0.5)
    return x, y, w, b


def workload(x, y, w, b):
    """KernelBench applies InstanceNorm2d (no affine) to x viewed as [B, 1, 1, out], i.e. it normalises each row
    over its out features; stats in f32, result in x's dtype."""
    h = lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    h = h + b.astype(jnp.float32)
    mean = jnp.mean(h, axis=1, keepdims=True)
    var = jnp.mean(jnp.square(h - mean), axis=1, keepdims=True)
    h = (h - mean) * lax.rsqrt(var + CONFIG["eps"])
    yf = y.astype(jnp.float32)
    return ((h + yf) * yf).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    out = d["batch_size"] * d["out_features"]
    return 2 * out * d["in_features"] + 9 * out
