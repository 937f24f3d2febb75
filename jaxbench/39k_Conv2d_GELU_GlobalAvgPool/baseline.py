"""39k_Conv2d_GELU_GlobalAvgPool: KernelBench L2 #67, mean over H, W of gelu(conv2d(x, W) + b), NCHW."""

import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "conv2d_gelu_global_avg_pool",
    "model": "KernelBench L2",
    "operator": "conv2d_gelu_global_avg_pool",
    "batch_size": 128,
    "in_channels": 8,
    "out_channels": 64,
    "kernel_size": 3,
    "height": 256,
    "width": 256,
}
SIZES = {"smoke": {"batch_size": 8, "height": 18, "width": 18}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[N, C_in, H, W], w[C_out, C_in, k, k] (torch Conv2d layout), b[C_out]).

    Each image channel carries its own offset (as real images do): averaging over H*W cancels
    zero-mean noise, so without it every image would pool to nearly the same per-channel value.
    """
    d = dims(CONFIG, SIZES, size)
    kx, ks, kw, kb = keys(seed, 4)
    n, c, k = d["batch_size"], d["in_channels"], d["kernel_size"]
    x = draw(kx, (n, c, d["height"], d["width"]), jnp.float32, seed)
    x = (x + draw(ks, (n, c, 1, 1), jnp.float32, seed)).astype(dtype)
    w = draw(kw, (d["out_channels"], c, k, k), dtype, seed, scale=1 / math.sqrt(c * k * k))
    b = draw(kb, (d["out_channels"],), dtype, seed, scale=0.5)
    return x, w, b


def workload(x, w, b):
    """VALID stride-1 conv (f32 accumulation); exact (erf) GELU and the spatial mean in f32; [N, C_out], x's dtype."""
    y = lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                 preferred_element_type=jnp.float32)
    y = jax.nn.gelu(y + b.astype(jnp.float32)[None, :, None, None], approximate=False)
    return jnp.mean(y, axis=(2, 3)).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    k = d["kernel_size"]
    outs = d["batch_size"] * d["out_channels"] * (d["height"] - k + 1) * (d["width"] - k + 1)
    # conv + bias, ~8 for GELU, 1 for the mean per conv output.
    return outs * (2 * d["in_channels"] * k * k + 1 + 8 + 1)
