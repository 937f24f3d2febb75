"""44k_Matmul_Divide_GELU: KernelBench L2 #86, gelu((x @ W^T + b) / divisor)."""

import math

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "matmul_divide_gelu",
    "model": "KernelBench L2",
    "operator": "matmul_divide_gelu",
    "batch_size": 4096,
    "input_size": 8192,
    "output_size": 8192,
    "divisor": 10.0,
}
SIZES = {"smoke": {"batch_size": 128, "input_size": 512, "output_size": 256}}

# Std of the Linear output in units of the divisor: after dividing, GELU sees values of std 2 and
# works in its curved range rather than near-linearly around 0.
GEMM_SCALE = 2.0 * CONFIG["divisor"]


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[batch_size, input_size], w[output_size, input_size] (torch Linear layout), b[output_size])."""
    d = dims(CONFIG, SIZES, size)
    kx, kw, kb = keys(seed, 3)
    x = draw(kx, (d["batch_size"], d["input_size"]), dtype, seed)
    w = draw(kw, (d["output_size"], d["input_size"]), dtype, seed, scale=GEMM_SCALE / math.sqrt(d["input_size"]))
    b = draw(kb, (d["output_size"],), dtype, seed, scale=CONFIG["divisor"])
    return x, w, b


def workload(x, w, b):
    """Linear with f32 accumulation; divide and exact (erf) GELU in f32; result in x's dtype."""
    z = jnp.einsum("bi,oi->bo", x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)
    return jax.nn.gelu(z / CONFIG["divisor"], approximate=False).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    bsz, i, o = d["batch_size"], d["input_size"], d["output_size"]
    # matmul + bias, divide, ~8 for GELU per output.
    return 2 * bsz * i * o + bsz * o * (1 + 1 + 8)
