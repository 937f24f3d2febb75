"""21k_Gemm_Divide_Sum_Scaling: KernelBench L2 #14, row sums of (x @ w.T) / 2 times a scale, shape [B, 1]."""

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "gemm_divide_sum_scaling",
    "model": "KernelBench L2",
    "operator": "gemm_divide_sum_scaling",
    "batch_size": 4096,
    "input_size": 8192,
    "hidden_size": 8192,
    "scaling_factor": 1.5,
    "divisor": 2.0,
}
SIZES = {"smoke": {"batch_size": 128, "input_size": 512, "hidden_size": 256}}
# The sum over the Linear's outputs collapses it: sum_j x . w_j = x . (sum_j w_j), a matrix-vector product, so a
# kernel that does that is "fast" without doing the GEMM. `maxkernel bench kernels` lists this task's row and leaves
# it out of fast_p (tests/evals/test_kernel_table.py checks the collapse numerically).
DEGENERATE = "the row sum of x @ w.T is x @ sum(w, axis=0): a matrix-vector product, not a GEMM"


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B,input_size], w[hidden_size,input_size]); KernelBench's weight is bias-free."""
    d = dims(CONFIG, SIZES, size)
    k1, k2 = keys(seed, 2)
    x = draw(k1, (d["batch_size"], d["input_size"]), dtype, seed)
    w = weight(k2, (d["hidden_size"], d["input_size"]), dtype, seed, fan_in=d["input_size"])
    return x, w


def workload(x, w):
    """sum_j (x @ w.T)[:, j] / divisor * scaling_factor, reduced in f32; result [B, 1] in x's dtype."""
    y = lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    y = jnp.sum(y / CONFIG["divisor"], axis=1, keepdims=True)
    return (y * CONFIG["scaling_factor"]).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    out = d["batch_size"] * d["hidden_size"]
    return 2 * out * d["input_size"] + 2 * out + d["batch_size"]
