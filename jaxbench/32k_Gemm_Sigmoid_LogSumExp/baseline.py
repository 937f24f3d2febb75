"""32k_Gemm_Sigmoid_LogSumExp: KernelBench L2 #45, Linear, sigmoid, Linear, LogSumExp over each row's outputs."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "gemm_sigmoid_logsumexp",
    "model": "KernelBench L2",
    "operator": "gemm_sigmoid_logsumexp",
    "batch_size": 16384,
    "input_size": 2048,
    "hidden_size": 4096,
    "output_size": 1024,
}
SIZES = {"smoke": {"batch_size": 128, "input_size": 256, "hidden_size": 512, "output_size": 256}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B,input], w1[hidden,input], b1[hidden], w2[out,hidden], b2[out]).

    w2 is scaled 8x beyond 1/sqrt(fan_in) so the logits spread over several units and each row's LogSumExp
    follows its largest logits; at unit scale it sits near log(output_size) for every row.
    """
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3, k4, k5 = keys(seed, 5)
    x = draw(k1, (d["batch_size"], d["input_size"]), dtype, seed)
    w1 = weight(k2, (d["hidden_size"], d["input_size"]), dtype, seed, fan_in=d["input_size"])
    b1 = draw(k3, (d["hidden_size"],), dtype, seed, scale=0.5)
    w2 = draw(k4, (d["output_size"], d["hidden_size"]), dtype, seed, scale=8.0 / d["hidden_size"] ** 0.5)
    b2 = draw(k5, (d["output_size"],), dtype, seed, scale=0.5)
    return x, w1, b1, w2, b2


def workload(x, w1, b1, w2, b2):
    """The hidden activation is cast to x's dtype before the second matmul, as a bf16 model would; f32 LogSumExp."""
    h = lax.dot_general(x, w1, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    h = jax.nn.sigmoid(h + b1.astype(jnp.float32)).astype(x.dtype)
    z = lax.dot_general(h, w2, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    z = z + b2.astype(jnp.float32)
    m = jnp.max(z, axis=1)
    return (m + jnp.log(jnp.sum(jnp.exp(z - m[:, None]), axis=1))).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    b, h, o = d["batch_size"], d["hidden_size"], d["output_size"]
    return 2 * b * h * (d["input_size"] + o) + 5 * b * h + 5 * b * o
