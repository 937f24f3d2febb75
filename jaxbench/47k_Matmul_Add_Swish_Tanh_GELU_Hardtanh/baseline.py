"""47k_Matmul_Add_Swish_Tanh_GELU_Hardtanh: KernelBench L2 #95, hardtanh(gelu(tanh(swish(x @ W^T + b + add_value))))."""

import math

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "matmul_add_swish_tanh_gelu_hardtanh",
    "model": "KernelBench L2",
    "operator": "matmul_add_swish_tanh_gelu_hardtanh",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}

# Std of the Linear output: spreads swish's output over tanh's curved range on both sides.
GEMM_SCALE = 1.5


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B, in], w[out, in] (torch Linear layout), b[out], add_value[out])."""
    d = dims(CONFIG, SIZES, size)
    kx, kw, kb, ka = keys(seed, 4)
    x = draw(kx, (d["batch_size"], d["in_features"]), dtype, seed)
    w = draw(kw, (d["out_features"], d["in_features"]), dtype, seed, scale=GEMM_SCALE / math.sqrt(d["in_features"]))
    b = draw(kb, (d["out_features"],), dtype, seed, scale=0.5)
    add_value = draw(ka, (d["out_features"],), dtype, seed)
    return x, w, b, add_value


def workload(x, w, b, add_value):
    """Linear (f32 accumulation); add, swish, tanh, exact (erf) GELU, hardtanh(-1, 1) in f32; x's dtype.

    The final hardtanh never clips (GELU of tanh lies in [-0.17, 0.85]) but is kept, as in KernelBench.
    """
    z = jnp.einsum("bi,oi->bo", x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)
    z = z + add_value.astype(jnp.float32)
    z = jnp.tanh(z * jax.nn.sigmoid(z))
    return jnp.clip(jax.nn.gelu(z, approximate=False), -1.0, 1.0).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    bsz, i, o = d["batch_size"], d["in_features"], d["out_features"]
    # matmul + bias, add, 5 swish, ~4 tanh, ~8 GELU, 2 hardtanh per output.
    return 2 * bsz * i * o + bsz * o * (1 + 1 + 5 + 4 + 8 + 2)
