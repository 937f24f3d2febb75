"""35k_Gemm_Scaling_Hardtanh_GELU: KernelBench L2 #53, gelu(hardtanh(scaling_factor * (x @ W^T + b)))."""

import math

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "gemm_scaling_hardtanh_gelu",
    "model": "KernelBench L2",
    "operator": "gemm_scaling_hardtanh_gelu",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
    "scaling_factor": 0.5,
    "hardtanh_min": -2,
    "hardtanh_max": 2,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}

# Std of the Linear output: after scaling by 0.5 about a third of the values lie outside [-2, 2],
# so the hardtanh clips for real and a kernel that drops it fails.
GEMM_SCALE = 4.0


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[batch_size, in_features], w[out_features, in_features] (torch Linear layout), b[out_features])."""
    d = dims(CONFIG, SIZES, size)
    kx, kw, kb = keys(seed, 3)
    x = draw(kx, (d["batch_size"], d["in_features"]), dtype, seed)
    w = draw(kw, (d["out_features"], d["in_features"]), dtype, seed, scale=GEMM_SCALE / math.sqrt(d["in_features"]))
    b = draw(kb, (d["out_features"],), dtype, seed)
    return x, w, b


def workload(x, w, b):
    """Linear with f32 accumulation; scale, hardtanh and exact (erf) GELU in f32; result in x's dtype."""
    z = jnp.einsum("bi,oi->bo", x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)
    z = jnp.clip(z * CONFIG["scaling_factor"], CONFIG["hardtanh_min"], CONFIG["hardtanh_max"])
    return jax.nn.gelu(z, approximate=False).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    bsz, i, o = d["batch_size"], d["in_features"], d["out_features"]
    # matmul + bias, scale, clamp (2), ~8 for GELU per output.
    return 2 * bsz * i * o + bsz * o * (1 + 1 + 2 + 8)
