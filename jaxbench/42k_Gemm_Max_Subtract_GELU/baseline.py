"""42k_Gemm_Max_Subtract_GELU: KernelBench L2 #80, gelu(row max of x @ W^T + b, centred over the batch)."""

import math

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "gemm_max_subtract_gelu",
    "model": "KernelBench L2",
    "operator": "gemm_max_subtract_gelu",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
    "max_dim": 1,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}

# A weight component shared by all output features shifts each row's outputs together by x . v
# (std SHARED_SCALE), so row maxima differ by a few units rather than the ~0.3 of independent noise.
SHARED_SCALE = 2.0


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[batch_size, in_features], w[out_features, in_features] (torch Linear layout), b[out_features])."""
    d = dims(CONFIG, SIZES, size)
    kx, kw, kv, kb = keys(seed, 4)
    n_in, n_out = d["in_features"], d["out_features"]
    x = draw(kx, (d["batch_size"], n_in), dtype, seed)
    w = draw(kw, (n_out, n_in), jnp.float32, seed, scale=1 / math.sqrt(n_in))
    w = (w + draw(kv, (1, n_in), jnp.float32, seed, scale=SHARED_SCALE / math.sqrt(n_in))).astype(dtype)
    b = draw(kb, (n_out,), dtype, seed)
    return x, w, b


def workload(x, w, b):
    """Linear (f32 accumulation); max over max_dim; subtract the mean over the other dim; exact GELU; x's dtype.

    Deviation from KernelBench: it subtracts the mean over dim 1 after a keepdim max over dim 1, i.e. the
    value from itself, so its output is exactly gelu(0) = 0. Here the mean is taken over the dim the max
    kept (the batch, for max_dim=1); for max_dim=0 this is KernelBench's computation unchanged.
    Output: [batch_size, 1] for max_dim=1.
    """
    z = jnp.einsum("bi,oi->bo", x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)
    max_dim = CONFIG["max_dim"]
    m = jnp.max(z, axis=max_dim, keepdims=True)
    m = m - jnp.mean(m, axis=1 - max_dim, keepdims=True)
    return jax.nn.gelu(m, approximate=False).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    bsz, i, o = d["batch_size"], d["in_features"], d["out_features"]
    # matmul + bias and the max per output; mean, subtract and ~8 for GELU per row.
    return 2 * bsz * i * o + 2 * bsz * o + bsz * (2 + 8)
