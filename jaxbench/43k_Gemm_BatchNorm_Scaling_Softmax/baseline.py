"""43k_Gemm_BatchNorm_Scaling_Softmax: KernelBench L2 #84, softmax(scale * batchnorm(x @ W^T + b)) over features."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "gemm_batchnorm_scaling_softmax",
    "model": "KernelBench L2",
    "operator": "gemm_batchnorm_scaling_softmax",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
    "bn_eps": 1e-05,
    "bn_momentum": 0.1,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B, in], w[out, in] (torch Linear layout), b[out], bn_weight[out], bn_bias[out], scale[out]).

    BatchNorm leaves every feature at unit spread, so the logits' spread comes from bn_weight * scale
    (rms ~2.8): each row's softmax is peaked rather than near-uniform as in the public suite.
    """
    d = dims(CONFIG, SIZES, size)
    kx, kw, kb, kg, kbeta, ks = keys(seed, 6)
    n_in, n_out = d["in_features"], d["out_features"]
    x = draw(kx, (d["batch_size"], n_in), dtype, seed)
    w = weight(kw, (n_out, n_in), dtype, seed, fan_in=n_in)
    b = draw(kb, (n_out,), dtype, seed)
    bn_weight = draw(kg, (n_out,), dtype, seed, scale=0.5, shift=1.0)
    bn_bias = draw(kbeta, (n_out,), dtype, seed, scale=0.5)
    scale = draw(ks, (n_out,), dtype, seed, scale=1.5, shift=2.0)
    return x, w, b, bn_weight, bn_bias, scale


def workload(x, w, b, bn_weight, bn_bias, scale):
    """Linear (f32 accumulation); BatchNorm1d, scale and softmax over features in f32; result in x's dtype.

    BatchNorm runs as KernelBench runs it, in training mode: each feature is normalised with the batch's
    mean and biased variance (bn_momentum only updates running statistics, which are not an output; the
    Linear bias cancels in the mean but stays an input). KernelBench's scale has shape (1,); here it is
    per feature (a drawn shape-(1,) input could not be mixed-sign), which includes the scalar case.
    """
    z = jnp.einsum("bi,oi->bo", x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)
    mean = jnp.mean(z, axis=0, keepdims=True)
    var = jnp.mean(jnp.square(z - mean), axis=0, keepdims=True)
    z = (z - mean) * lax.rsqrt(var + CONFIG["bn_eps"])
    z = (z * bn_weight.astype(jnp.float32) + bn_bias.astype(jnp.float32)) * scale.astype(jnp.float32)
    return jax.nn.softmax(z, axis=1).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    bsz, i, o = d["batch_size"], d["in_features"], d["out_features"]
    # matmul + bias, ~6 for batch norm and affine, 1 for the scale, ~4 for softmax per output.
    return 2 * bsz * i * o + bsz * o * (1 + 6 + 1 + 4)
