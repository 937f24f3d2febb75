"""40k_Gemm_GroupNorm_Min_BiasAdd: KernelBench L2 #75, min over features of groupnorm(x @ W^T + b), plus a bias."""

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "gemm_groupnorm_min_bias_add",
    "model": "KernelBench L2",
    "operator": "gemm_groupnorm_min_bias_add",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
    "num_groups": 512,
    "eps": 1e-5,
}
# Smoke keeps the full size's 16 features per group.
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256, "num_groups": 16}}
GROUP_SIZE = CONFIG["out_features"] // CONFIG["num_groups"]


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B, in], w[out, in] (torch Linear layout), b[out], gn_weight[out], gn_bias[out], bias[1,out,1,1])."""
    d = dims(CONFIG, SIZES, size)
    assert d["out_features"] == d["num_groups"] * GROUP_SIZE, "every size keeps GROUP_SIZE features per group"
    kx, kw, kb, kg, kbeta, kbias = keys(seed, 6)
    n_in, n_out = d["in_features"], d["out_features"]
    x = draw(kx, (d["batch_size"], n_in), dtype, seed)
    w = weight(kw, (n_out, n_in), dtype, seed, fan_in=n_in)
    b = draw(kb, (n_out,), dtype, seed)
    gn_weight = draw(kg, (n_out,), dtype, seed, scale=0.5, shift=1.0)
    gn_bias = draw(kbeta, (n_out,), dtype, seed, scale=0.5)
    bias = draw(kbias, (1, n_out, 1, 1), dtype, seed)
    return x, w, b, gn_weight, gn_bias, bias


def workload(x, w, b, gn_weight, gn_bias, bias):
    """Linear (f32 accumulation), GroupNorm with f32 statistics, row min, bias add; result in x's dtype.

    As in KernelBench, the [B, 1] row minima broadcast against the [1, out, 1, 1] bias, so the output is
    [1, out_features, batch_size, 1] with out[0, j, i, 0] = min_i + bias[j].
    """
    z = jnp.einsum("bi,oi->bo", x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)
    bsz, n_out = z.shape
    g = z.reshape(bsz, n_out // GROUP_SIZE, GROUP_SIZE)
    mean = jnp.mean(g, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axis=-1, keepdims=True)
    z = ((g - mean) * lax.rsqrt(var + CONFIG["eps"])).reshape(bsz, n_out)
    z = z * gn_weight.astype(jnp.float32) + gn_bias.astype(jnp.float32)
    m = jnp.min(z, axis=1, keepdims=True)
    return (m + bias.astype(jnp.float32)).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    bsz, i, o = d["batch_size"], d["in_features"], d["out_features"]
    # matmul + bias, ~7 for the group norm and affine, 1 for the min per feature; the broadcast bias add.
    return 2 * bsz * i * o + bsz * o * (1 + 7 + 1) + bsz * o
