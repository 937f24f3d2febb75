"""29k_Matmul_Swish_Sum_GroupNorm: KernelBench L2 #37, Linear, Swish, bias add, GroupNorm over feature groups."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "matmul_swish_sum_groupnorm",
    "model": "KernelBench L2",
    "operator": "matmul_swish_sum_groupnorm",
    "batch_size": 8192,
    "in_features": 4096,
    "out_features": 4096,
    "num_groups": 64,
    "eps": 1e-5,
}
# num_groups is a hyperparameter the workload reads from CONFIG, so it stays 64 at every size.
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 512}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B,in], w[out,in], b[out], bias[out], gn_w[out], gn_b[out])."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3, k4, k5, k6 = keys(seed, 6)
    x = draw(k1, (d["batch_size"], d["in_features"]), dtype, seed)
    w = weight(k2, (d["out_features"], d["in_features"]), dtype, seed, fan_in=d["in_features"])
    b = draw(k3, (d["out_features"],), dtype, seed, scale=0.5)
    bias = draw(k4, (d["out_features"],), dtype, seed)
    gn_w = draw(k5, (d["out_features"],), dtype, seed, scale=0.5, shift=1.0)
    gn_b = draw(k6, (d["out_features"],), dtype, seed, scale=0.5)
    return x, w, b, bias, gn_w, gn_b


def workload(x, w, b, bias, gn_w, gn_b):
    """swish(x @ w.T + b) + bias, then GroupNorm over num_groups contiguous feature groups (f32 stats)."""
    y = lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    y = y + b.astype(jnp.float32)
    y = y * jax.nn.sigmoid(y) + bias.astype(jnp.float32)
    g = y.reshape(y.shape[0], CONFIG["num_groups"], -1)
    mean = jnp.mean(g, axis=2, keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axis=2, keepdims=True)
    y = ((g - mean) * lax.rsqrt(var + CONFIG["eps"])).reshape(y.shape)
    return (y * gn_w.astype(jnp.float32) + gn_b.astype(jnp.float32)).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    out = d["batch_size"] * d["out_features"]
    return 2 * out * d["in_features"] + 14 * out
