"""36k_Matmul_Sigmoid_Sum: KernelBench L2 #56, sum over features of sigmoid(x @ W^T + b), one value per row."""

import math

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "matmul_sigmoid_sum",
    "model": "KernelBench L2",
    "operator": "matmul_sigmoid_sum",
    "batch_size": 4096,
    "input_size": 8192,
    "hidden_size": 8192,
}
SIZES = {"smoke": {"batch_size": 128, "input_size": 512, "hidden_size": 256}}

# With independent zero-mean pre-activations every row sums to about hidden_size / 2 (+-1%), which a
# constant passes. A weight component shared by all hidden units moves a whole row's pre-activations
# together by x . v (std SHARED_SCALE), so row sums spread over most of [0, hidden_size].
SHARED_SCALE = 3.0


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[batch_size, input_size], w[hidden_size, input_size] (torch Linear layout), b[hidden_size])."""
    d = dims(CONFIG, SIZES, size)
    kx, kw, kv, kb = keys(seed, 4)
    n_in, n_hid = d["input_size"], d["hidden_size"]
    x = draw(kx, (d["batch_size"], n_in), dtype, seed)
    w = draw(kw, (n_hid, n_in), jnp.float32, seed, scale=1 / math.sqrt(n_in))
    w = (w + draw(kv, (1, n_in), jnp.float32, seed, scale=SHARED_SCALE / math.sqrt(n_in))).astype(dtype)
    b = draw(kb, (n_hid,), dtype, seed)
    return x, w, b


def workload(x, w, b):
    """Linear with f32 accumulation; sigmoid and row sum in f32; result [batch_size, 1] in x's dtype."""
    z = jnp.einsum("bi,oi->bo", x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)
    return jnp.sum(jax.nn.sigmoid(z), axis=1, keepdims=True).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    bsz, i, o = d["batch_size"], d["input_size"], d["hidden_size"]
    # matmul + bias, ~4 for sigmoid, 1 for the sum per output.
    return 2 * bsz * i * o + bsz * o * (1 + 4 + 1)
