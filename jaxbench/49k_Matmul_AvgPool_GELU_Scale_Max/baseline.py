"""49k_Matmul_AvgPool_GELU_Scale_Max: KernelBench L2 #98, row max of scale_factor * gelu(avgpool1d(x @ W^T + b)).

Degenerate (DEGENERATE below): the average pool is linear and comes straight after the Linear layer, so the stated
[batch, out_features] GEMM collapses to one with out_features / pool_kernel_size columns. The kernel table leaves
the task out of fast_p; a kernel is still judged like any other."""

import math

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "matmul_avgpool_gelu_scale_max",
    "model": "KernelBench L2",
    "operator": "matmul_avgpool_gelu_scale_max",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
    "pool_kernel_size": 16,
    "scale_factor": 2.0,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}

# Why the stated work collapses (see the module docstring); `Task.degenerate` reads it, and the kernel table leaves
# the task out of fast_p.
DEGENERATE = ("the average pool over pool_kernel_size consecutive features of x @ w.T + b is x @ pool(w).T + pool(b): "
              "a GEMM with 16 times fewer output columns")

# Std of the independent part of the Linear output: averaging pool_kernel_size features divides it
# by 4, leaving pooled values of unit spread.
GEMM_SCALE = 4.0
# A weight component shared by all output features survives the pooling and moves each row's values
# together, so row maxima differ by several units rather than the ~0.3 of independent noise.
SHARED_SCALE = 1.5


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[batch_size, in_features], w[out_features, in_features] (torch Linear layout), b[out_features])."""
    d = dims(CONFIG, SIZES, size)
    kx, kw, kv, kb = keys(seed, 4)
    n_in, n_out = d["in_features"], d["out_features"]
    x = draw(kx, (d["batch_size"], n_in), dtype, seed)
    w = draw(kw, (n_out, n_in), jnp.float32, seed, scale=GEMM_SCALE / math.sqrt(n_in))
    w = (w + draw(kv, (1, n_in), jnp.float32, seed, scale=SHARED_SCALE / math.sqrt(n_in))).astype(dtype)
    b = draw(kb, (n_out,), dtype, seed)
    return x, w, b


def workload(x, w, b):
    """Linear (f32 accumulation); non-overlapping average pool over features, exact (erf) GELU, scale and
    row max in f32; result [batch_size] in x's dtype."""
    z = jnp.einsum("bi,oi->bo", x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)
    k = CONFIG["pool_kernel_size"]
    bsz, n_out = z.shape
    # AvgPool1d drops a ragged tail, as torch does.
    z = jnp.mean(z[:, : n_out // k * k].reshape(bsz, n_out // k, k), axis=-1)
    z = jax.nn.gelu(z, approximate=False) * CONFIG["scale_factor"]
    return jnp.max(z, axis=1).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    bsz, i, o = d["batch_size"], d["in_features"], d["out_features"]
    pooled = o // d["pool_kernel_size"]
    # matmul + bias and the pooling sum per output; divide, ~8 GELU, scale, max per pooled value.
    return 2 * bsz * i * o + 2 * bsz * o + bsz * pooled * (1 + 8 + 1 + 1)
