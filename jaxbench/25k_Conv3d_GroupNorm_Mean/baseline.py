"""25k_Conv3d_GroupNorm_Mean: KernelBench L2 #23, 3x3x3 conv (NCDHW), GroupNorm, mean over all but batch."""

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "conv3d_groupnorm_mean",
    "model": "KernelBench L2",
    "operator": "conv3d_groupnorm_mean",
    "batch_size": 128,
    "in_channels": 3,
    "out_channels": 24,
    "kernel_size": 3,
    "num_groups": 8,
    "depth": 24,
    "height": 32,
    "width": 32,
    "eps": 1e-5,
}
SIZES = {"smoke": {"batch_size": 16, "depth": 6, "height": 10, "width": 10}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[N,Cin,D,H,W], conv_w[Cout,Cin,k,k,k], conv_b[Cout], gn_w[Cout], gn_b[Cout]).

    The mean of a group-normalised tensor is mean(gn_b) + mean_c(gn_w[c] * (channel mean - group mean) / group std),
    which is the same for every sample unless the samples' channel means differ: x therefore carries a per
    (sample, channel) offset drawn per seed, and gn_w spreads around 0.5 with both signs so the sample-dependent
    term is not cancelled within each group.
    """
    d = dims(CONFIG, SIZES, size)
    n, ci, co, k = d["batch_size"], d["in_channels"], d["out_channels"], d["kernel_size"]
    k1, k2, k3, k4, k5, k6 = keys(seed, 6)
    # Drawn 2-D and reshaped: XLA:CPU compiles random draws of rank-4/5 shapes several times slower.
    spatial = (d["depth"], d["height"], d["width"])
    offset = draw(k6, (n * ci, 1), jnp.float32, seed)
    x = draw(k1, (n * ci, spatial[0] * spatial[1] * spatial[2]), jnp.float32, seed) + offset
    x = x.astype(dtype).reshape(n, ci, *spatial)
    conv_w = weight(k2, (co, ci * k ** 3), dtype, seed, fan_in=ci * k ** 3).reshape(co, ci, k, k, k)
    conv_b = draw(k3, (co,), dtype, seed, scale=0.5)
    gn_w = draw(k4, (co,), dtype, seed, scale=1.0, shift=0.5)
    gn_b = draw(k5, (co,), dtype, seed, scale=0.1)
    return x, conv_w, conv_b, gn_w, gn_b


def workload(x, conv_w, conv_b, gn_w, gn_b):
    """Conv with f32 accumulation, GroupNorm with f32 stats, f32 mean; result [N] in x's dtype."""
    y = lax.conv_general_dilated(x, conv_w, (1, 1, 1), "VALID", dimension_numbers=("NCDHW", "OIDHW", "NCDHW"),
                                 preferred_element_type=jnp.float32)
    y = y + conv_b.astype(jnp.float32)[:, None, None, None]
    n = y.shape[0]
    g = y.reshape(n, CONFIG["num_groups"], -1)
    mean = jnp.mean(g, axis=2, keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axis=2, keepdims=True)
    y = ((g - mean) * lax.rsqrt(var + CONFIG["eps"])).reshape(y.shape)
    y = y * gn_w.astype(jnp.float32)[:, None, None, None] + gn_b.astype(jnp.float32)[:, None, None, None]
    return jnp.mean(y, axis=(1, 2, 3, 4)).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    k = d["kernel_size"]
    spatial = (d["depth"] - k + 1) * (d["height"] - k + 1) * (d["width"] - k + 1)
    out = d["batch_size"] * d["out_channels"] * spatial
    return 2 * out * d["in_channels"] * k ** 3 + 9 * out
