"""45k_Gemm_GroupNorm_Swish_Multiply_Swish: KernelBench L2 #88, swish(swish(groupnorm(x @ W^T + b)) * m)."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "gemm_groupnorm_swish_multiply_swish",
    "model": "KernelBench L2",
    "operator": "gemm_groupnorm_swish_multiply_swish",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
    "num_groups": 256,
    "eps": 1e-5,
}
# Smoke keeps the full size's 32 features per group.
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256, "num_groups": 8}}
GROUP_SIZE = CONFIG["out_features"] // CONFIG["num_groups"]


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B, in], w[out, in] (torch Linear layout), b, gn_weight, gn_bias, multiply_weight (each [out]))."""
    d = dims(CONFIG, SIZES, size)
    assert d["out_features"] == d["num_groups"] * GROUP_SIZE, "every size keeps GROUP_SIZE features per group"
    kx, kw, kb, kg, kbeta, km = keys(seed, 6)
    n_in, n_out = d["in_features"], d["out_features"]
    x = draw(kx, (d["batch_size"], n_in), dtype, seed)
    w = weight(kw, (n_out, n_in), dtype, seed, fan_in=n_in)
    b = draw(kb, (n_out,), dtype, seed)
    gn_weight = draw(kg, (n_out,), dtype, seed, scale=0.5, shift=1.0)
    gn_bias = draw(kbeta, (n_out,), dtype, seed, scale=0.5)
    multiply_weight = draw(km, (n_out,), dtype, seed, scale=1.5)
    return x, w, b, gn_weight, gn_bias, multiply_weight


def workload(x, w, b, gn_weight, gn_bias, multiply_weight):
    """Linear (f32 accumulation); GroupNorm with f32 statistics, swish, multiply, swish in f32; x's dtype."""
    z = jnp.einsum("bi,oi->bo", x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)
    bsz, n_out = z.shape
    g = z.reshape(bsz, n_out // GROUP_SIZE, GROUP_SIZE)
    mean = jnp.mean(g, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axis=-1, keepdims=True)
    z = ((g - mean) * lax.rsqrt(var + CONFIG["eps"])).reshape(bsz, n_out)
    z = z * gn_weight.astype(jnp.float32) + gn_bias.astype(jnp.float32)
    z = z * jax.nn.sigmoid(z) * multiply_weight.astype(jnp.float32)
    return (z * jax.nn.sigmoid(z)).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    bsz, i, o = d["batch_size"], d["in_features"], d["out_features"]
    # matmul + bias, ~7 for the group norm and affine, 5 per swish (two), 1 for the multiply per output.
    return 2 * bsz * i * o + bsz * o * (1 + 7 + 5 + 1 + 5)
