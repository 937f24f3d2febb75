"""34k_Conv2d_Activation_BatchNorm: KernelBench L2 #52, 3x3 conv (NCHW), x * tanh(softplus(x)), BatchNorm2d."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "conv2d_activation_batchnorm",
    "model": "KernelBench L2",
    "operator": "conv2d_activation_batchnorm",
    "batch_size": 64,
    "in_channels": 64,
    "out_channels": 128,
    "kernel_size": 3,
    "height": 128,
    "width": 128,
    "eps": 1e-5,
}
SIZES = {"smoke": {"batch_size": 4, "in_channels": 16, "out_channels": 32, "height": 18, "width": 18}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[N,Cin,H,W], conv_w[Cout,Cin,k,k], conv_b[Cout], bn_w[Cout], bn_b[Cout])."""
    d = dims(CONFIG, SIZES, size)
    n, ci, co, k = d["batch_size"], d["in_channels"], d["out_channels"], d["kernel_size"]
    k1, k2, k3, k4, k5 = keys(seed, 5)
    # Drawn 2-D and reshaped: XLA:CPU compiles random draws of rank-4/5 shapes several times slower.
    x = draw(k1, (n * ci, d["height"] * d["width"]), dtype, seed).reshape(n, ci, d["height"], d["width"])
    conv_w = weight(k2, (co, ci * k * k), dtype, seed, fan_in=ci * k * k).reshape(co, ci, k, k)
    conv_b = draw(k3, (co,), dtype, seed, scale=0.5)
    bn_w = draw(k4, (co,), dtype, seed, scale=1.0, shift=0.5)
    bn_b = draw(k5, (co,), dtype, seed, scale=0.5)
    return x, conv_w, conv_b, bn_w, bn_b


def workload(x, conv_w, conv_b, bn_w, bn_b):
    """BatchNorm in its training form, as KernelBench runs the module: per-channel mean and biased variance over
    (N, H, W) in f32, no running statistics; result in x's dtype."""
    y = lax.conv_general_dilated(x, conv_w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                 preferred_element_type=jnp.float32)
    y = y + conv_b.astype(jnp.float32)[:, None, None]
    y = y * jnp.tanh(jax.nn.softplus(y))
    mean = jnp.mean(y, axis=(0, 2, 3), keepdims=True)
    var = jnp.mean(jnp.square(y - mean), axis=(0, 2, 3), keepdims=True)
    y = (y - mean) * lax.rsqrt(var + CONFIG["eps"])
    return (y * bn_w.astype(jnp.float32)[:, None, None] + bn_b.astype(jnp.float32)[:, None, None]).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    k = d["kernel_size"]
    out = d["batch_size"] * d["out_channels"] * (d["height"] - k + 1) * (d["width"] - k + 1)
    return 2 * out * d["in_channels"] * k * k + 14 * out
