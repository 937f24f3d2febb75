"""18k_Conv2D_ReLU_BiasAdd: KernelBench L2 #1, a 3x3 conv (NCHW, VALID), ReLU, then a per-channel bias add."""

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "conv2d_relu_biasadd",
    "model": "KernelBench L2",
    "operator": "conv2d_relu_biasadd",
    "batch_size": 128,
    "in_channels": 64,
    "out_channels": 128,
    "kernel_size": 3,
    "height": 128,
    "width": 128,
}
SIZES = {"smoke": {"batch_size": 2, "in_channels": 16, "out_channels": 32, "height": 18, "width": 18}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[N,Cin,H,W], conv_w[Cout,Cin,k,k], conv_b[Cout], bias[Cout,1,1]), torch layouts."""
    d = dims(CONFIG, SIZES, size)
    n, ci, co, k = d["batch_size"], d["in_channels"], d["out_channels"], d["kernel_size"]
    k1, k2, k3, k4 = keys(seed, 4)
    # Drawn 2-D and reshaped: XLA:CPU compiles random draws of rank-4/5 shapes several times slower.
    x = draw(k1, (n * ci, d["height"] * d["width"]), dtype, seed).reshape(n, ci, d["height"], d["width"])
    conv_w = weight(k2, (co, ci * k * k), dtype, seed, fan_in=ci * k * k).reshape(co, ci, k, k)
    conv_b = draw(k3, (co,), dtype, seed, scale=0.5)
    bias = draw(k4, (co,), dtype, seed, scale=0.5).reshape(co, 1, 1)
    return x, conv_w, conv_b, bias


def workload(x, conv_w, conv_b, bias):
    """relu(conv2d(x) + conv_b) + bias, accumulated and finished in f32, returned in x's dtype."""
    y = lax.conv_general_dilated(x, conv_w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                 preferred_element_type=jnp.float32)
    y = jnp.maximum(y + conv_b.astype(jnp.float32)[:, None, None], 0.0)
    return (y + bias.astype(jnp.float32)).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    k = d["kernel_size"]
    out = d["batch_size"] * d["out_channels"] * (d["height"] - k + 1) * (d["width"] - k + 1)
    return 2 * out * d["in_channels"] * k * k + 3 * out
