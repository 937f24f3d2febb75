"""22k_Conv2d_InstanceNorm_Divide: KernelBench L2 #17, 3x3 conv (NCHW), InstanceNorm2d, divide by a constant."""

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "conv2d_instancenorm_divide",
    "model": "KernelBench L2",
    "operator": "conv2d_instancenorm_divide",
    "batch_size": 128,
    "in_channels": 64,
    "out_channels": 128,
    "kernel_size": 3,
    "height": 128,
    "width": 128,
    "divide_by": 2.0,
    "eps": 1e-5,
}
SIZES = {"smoke": {"batch_size": 2, "in_channels": 16, "out_channels": 32, "height": 18, "width": 18}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[N,Cin,H,W], conv_w[Cout,Cin,k,k], conv_b[Cout]); InstanceNorm2d has no affine by default."""
    d = dims(CONFIG, SIZES, size)
    n, ci, co, k = d["batch_size"], d["in_channels"], d["out_channels"], d["kernel_size"]
    k1, k2, k3 = keys(seed, 3)
    # Drawn 2-D and reshaped: XLA:CPU compiles random draws of rank-4/5 shapes several times slower.
    x = draw(k1, (n * ci, d["height"] * d["width"]), dtype, seed).reshape(n, ci, d["height"], d["width"])
    conv_w = weight(k2, (co, ci * k * k), dtype, seed, fan_in=ci * k * k).reshape(co, ci, k, k)
    conv_b = draw(k3, (co,), dtype, seed, scale=0.5)
    return x, conv_w, conv_b


def workload(x, conv_w, conv_b):
    """Per (sample, channel) normalisation over H, W with f32 stats, divided by divide_by; result in x's dtype.

    The conv bias is kept as torch has it, although the normalisation cancels it.
    """
    y = lax.conv_general_dilated(x, conv_w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                 preferred_element_type=jnp.float32)
    y = y + conv_b.astype(jnp.float32)[:, None, None]
    mean = jnp.mean(y, axis=(2, 3), keepdims=True)
    var = jnp.mean(jnp.square(y - mean), axis=(2, 3), keepdims=True)
    y = (y - mean) * lax.rsqrt(var + CONFIG["eps"])
    return (y / CONFIG["divide_by"]).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    k = d["kernel_size"]
    out = d["batch_size"] * d["out_channels"] * (d["height"] - k + 1) * (d["width"] - k + 1)
    return 2 * out * d["in_channels"] * k * k + 8 * out
