"""33k_Conv3d_Mish_Tanh: KernelBench L2 #47, a 3x3x3 conv (NCDHW, VALID), Mish, then tanh."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "conv3d_mish_tanh",
    "model": "KernelBench L2",
    "operator": "conv3d_mish_tanh",
    "batch_size": 16,
    "in_channels": 32,
    "out_channels": 64,
    "kernel_size": 3,
    "depth": 32,
    "height": 64,
    "width": 64,
}
SIZES = {"smoke": {"batch_size": 2, "in_channels": 8, "out_channels": 16, "depth": 6, "height": 10, "width": 10}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[N,Cin,D,H,W], conv_w[Cout,Cin,k,k,k], conv_b[Cout])."""
    d = dims(CONFIG, SIZES, size)
    n, ci, co, k = d["batch_size"], d["in_channels"], d["out_channels"], d["kernel_size"]
    k1, k2, k3 = keys(seed, 3)
    # Drawn 2-D and reshaped: XLA:CPU compiles random draws of rank-4/5 shapes several times slower.
    spatial = (d["depth"], d["height"], d["width"])
    x = draw(k1, (n * ci, spatial[0] * spatial[1] * spatial[2]), dtype, seed).reshape(n, ci, *spatial)
    conv_w = weight(k2, (co, ci * k ** 3), dtype, seed, fan_in=ci * k ** 3).reshape(co, ci, k, k, k)
    conv_b = draw(k3, (co,), dtype, seed, scale=0.5)
    return x, conv_w, conv_b


def workload(x, conv_w, conv_b):
    """tanh(mish(conv3d(x) + conv_b)) in f32 from the f32 accumulator; result in x's dtype."""
    y = lax.conv_general_dilated(x, conv_w, (1, 1, 1), "VALID", dimension_numbers=("NCDHW", "OIDHW", "NCDHW"),
                                 preferred_element_type=jnp.float32)
    y = y + conv_b.astype(jnp.float32)[:, None, None, None]
    y = y * jnp.tanh(jax.nn.softplus(y))
    return jnp.tanh(y).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    k = d["kernel_size"]
    spatial = (d["depth"] - k + 1) * (d["height"] - k + 1) * (d["width"] - k + 1)
    out = d["batch_size"] * d["out_channels"] * spatial
    return 2 * out * d["in_channels"] * k ** 3 + 10 * out
