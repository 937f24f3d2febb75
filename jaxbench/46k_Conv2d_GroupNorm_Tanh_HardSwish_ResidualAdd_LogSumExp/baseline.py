"""46k_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp: KernelBench L2 #92, lse_c(y + hswish(tanh(gn(y))))."""

import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "conv2d_groupnorm_tanh_hardswish_residual_add_logsumexp",
    "model": "KernelBench L2",
    "operator": "conv2d_groupnorm_tanh_hardswish_residual_add_logsumexp",
    "batch_size": 128,
    "in_channels": 8,
    "out_channels": 64,
    "kernel_size": 3,
    "groups": 16,
    "height": 128,
    "width": 128,
    "eps": 1e-5,
}
SIZES = {"smoke": {"batch_size": 8, "height": 18, "width": 18}}

# Std of the conv output: the residual carries it into the logsumexp, where a spread of several units
# lets the largest channels decide each pixel instead of the constant log(out_channels) offset.
CONV_SCALE = 3.0


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[N, C_in, H, W], w[C_out, C_in, k, k] (torch Conv2d layout), b, gn_weight, gn_bias (each [C_out])).

    Each image channel carries its own offset, as real images do, so pixels of different images differ in level.
    """
    d = dims(CONFIG, SIZES, size)
    kx, ks, kw, kb, kg, kbeta = keys(seed, 6)
    n, c, k, c_out = d["batch_size"], d["in_channels"], d["kernel_size"], d["out_channels"]
    x = draw(kx, (n, c, d["height"], d["width"]), jnp.float32, seed)
    x = (x + draw(ks, (n, c, 1, 1), jnp.float32, seed)).astype(dtype)
    # x has variance 2 (noise plus offset), hence the 2 in the fan-in.
    w = draw(kw, (c_out, c, k, k), dtype, seed, scale=CONV_SCALE / math.sqrt(2 * c * k * k))
    b = draw(kb, (c_out,), dtype, seed)
    gn_weight = draw(kg, (c_out,), dtype, seed, scale=0.5, shift=1.0)
    gn_bias = draw(kbeta, (c_out,), dtype, seed, scale=0.5)
    return x, w, b, gn_weight, gn_bias


def workload(x, w, b, gn_weight, gn_bias):
    """VALID stride-1 conv (f32 accumulation), then GroupNorm (f32 statistics), tanh, hardswish, residual add
    of the conv output and logsumexp over channels, all in f32; result [N, 1, H', W'] in x's dtype."""
    y = lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                 preferred_element_type=jnp.float32)
    y = y + b.astype(jnp.float32)[None, :, None, None]
    n, c, h, wd = y.shape
    g = y.reshape(n, CONFIG["groups"], c // CONFIG["groups"], h, wd)
    mean = jnp.mean(g, axis=(2, 3, 4), keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axis=(2, 3, 4), keepdims=True)
    t = ((g - mean) * lax.rsqrt(var + CONFIG["eps"])).reshape(n, c, h, wd)
    t = t * gn_weight.astype(jnp.float32)[None, :, None, None] + gn_bias.astype(jnp.float32)[None, :, None, None]
    r = y + jax.nn.hard_swish(jnp.tanh(t))
    return jax.nn.logsumexp(r, axis=1, keepdims=True).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    k = d["kernel_size"]
    outs = d["batch_size"] * d["out_channels"] * (d["height"] - k + 1) * (d["width"] - k + 1)
    # conv + bias, ~7 group norm and affine, ~4 tanh, 4 hardswish, 1 residual, ~3 logsumexp per conv output.
    return outs * (2 * d["in_channels"] * k * k + 1 + 7 + 4 + 4 + 1 + 3)
