"""28k_ConvTranspose3d_LayerNorm_GELU_Scaling: KernelBench L2 #34, ConvTranspose3d, LayerNorm, GELU, scale."""

import jax.numpy as jnp
from jax import lax
from jax.scipy.special import erf

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "convtranspose3d_layernorm_gelu_scaling",
    "model": "KernelBench L2",
    "operator": "convtranspose3d_layernorm_gelu_scaling",
    "batch_size": 32,
    "in_channels": 32,
    "out_channels": 64,
    "kernel_size": 4,
    "stride": 2,
    "padding": 1,
    "bias": True,
    "eps": 1e-05,
    "scaling_factor": 1.0,
    "depth": 16,
    "height": 32,
    "width": 32,
}
# The LayerNorm acts on the output's last axis, so the output width 2 * width must equal out_channels.
SIZES = {"smoke": {"batch_size": 2, "in_channels": 8, "out_channels": 16, "depth": 4, "height": 8, "width": 8}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[N,Cin,D,H,W], conv_w[Cin,Cout,k,k,k] (torch ConvTranspose layout), conv_b, ln_w, ln_b [Cout])."""
    d = dims(CONFIG, SIZES, size)
    n, ci, co, k, s = d["batch_size"], d["in_channels"], d["out_channels"], d["kernel_size"], d["stride"]
    k1, k2, k3, k4, k5 = keys(seed, 5)
    # Drawn 2-D and reshaped: XLA:CPU compiles random draws of rank-4/5 shapes several times slower.
    spatial = (d["depth"], d["height"], d["width"])
    x = draw(k1, (n * ci, spatial[0] * spatial[1] * spatial[2]), dtype, seed).reshape(n, ci, *spatial)
    # Each output position sums over Cin * (k / stride)^3 input taps.
    conv_w = weight(k2, (ci, co * k ** 3), dtype, seed, fan_in=ci * (k // s) ** 3).reshape(ci, co, k, k, k)
    conv_b = draw(k3, (co,), dtype, seed, scale=0.5)
    ln_w = draw(k4, (co,), dtype, seed, scale=0.5, shift=1.0)
    ln_b = draw(k5, (co,), dtype, seed, scale=0.5)
    return x, conv_w, conv_b, ln_w, ln_b


def workload(x, conv_w, conv_b, ln_w, ln_b):
    """Transposed conv as a stride-dilated conv with the flipped kernel, f32 accumulation; f32 epilogue.

    KernelBench applies nn.LayerNorm(out_channels) to the NCDHW output, which normalises the last (W) axis; at
    these sizes that axis has length out_channels, and the same is done here. GELU is torch's exact (erf) form.
    """
    k, s, p = conv_w.shape[-1], CONFIG["stride"], CONFIG["padding"]
    y = lax.conv_general_dilated(x, jnp.flip(conv_w, (2, 3, 4)), (1, 1, 1), [(k - 1 - p, k - 1 - p)] * 3,
                                 lhs_dilation=(s, s, s), dimension_numbers=("NCDHW", "IODHW", "NCDHW"),
                                 preferred_element_type=jnp.float32)
    y = y + conv_b.astype(jnp.float32)[:, None, None, None]
    mean = jnp.mean(y, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(y - mean), axis=-1, keepdims=True)
    y = (y - mean) * lax.rsqrt(var + CONFIG["eps"]) * ln_w.astype(jnp.float32) + ln_b.astype(jnp.float32)
    y = 0.5 * y * (1.0 + erf(y * 0.7071067811865476))
    return (y * CONFIG["scaling_factor"]).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    k, s = d["kernel_size"], d["stride"]
    spatial_in = d["depth"] * d["height"] * d["width"]
    out = d["batch_size"] * d["out_channels"] * spatial_in * s ** 3
    return 2 * d["batch_size"] * spatial_in * d["in_channels"] * d["out_channels"] * k ** 3 + 16 * out
