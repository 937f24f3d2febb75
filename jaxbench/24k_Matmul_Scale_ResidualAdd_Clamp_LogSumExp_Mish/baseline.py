"""24k_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish: KernelBench L2 #22, Linear to l * mish(l), l a row LSE."""

import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "matmul_scale_residualadd_clamp_logsumexp_mish",
    "model": "KernelBench L2",
    "operator": "matmul_scale_residualadd_clamp_logsumexp_mish",
    "batch_size": 4096,
    "input_size": 8192,
    "hidden_size": 8192,
    "scale_factor": 2.0,
    "clamp_min": -10.0,
    "clamp_max": 10.0,
}
SIZES = {"smoke": {"batch_size": 128, "input_size": 512, "hidden_size": 256}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B,input_size], w[hidden,input_size], b[hidden]).

    Each row of x carries its own scale (log-uniform in [0.03, 1.5], drawn per seed): with one common scale the
    row LogSumExp sits near log(hidden) + const for every row and the output is close to a constant; with spread
    scales some rows stay far below the clamp and others saturate it, so the output varies by several times.
    """
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3, k4 = keys(seed, 4)
    rows = jnp.exp(jax.random.uniform(k4, (d["batch_size"], 1), jnp.float32, math.log(0.03), math.log(1.5)))
    x = (draw(k1, (d["batch_size"], d["input_size"]), jnp.float32, seed) * rows).astype(dtype)
    w = weight(k2, (d["hidden_size"], d["input_size"]), dtype, seed, fan_in=d["input_size"])
    b = draw(k3, (d["hidden_size"],), dtype, seed, scale=0.1)
    return x, w, b


def _mish(v):
    return v * jnp.tanh(jax.nn.softplus(v))


def workload(x, w, b):
    """The whole epilogue in f32 from the f32 accumulator; result [B, 1] in x's dtype."""
    y = lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    y = (y + b.astype(jnp.float32)) * CONFIG["scale_factor"]
    y = jnp.clip(y + y, CONFIG["clamp_min"], CONFIG["clamp_max"])
    m = jnp.max(y, axis=1, keepdims=True)
    lse = m + jnp.log(jnp.sum(jnp.exp(y - m), axis=1, keepdims=True))
    return (lse * _mish(lse)).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    out = d["batch_size"] * d["hidden_size"]
    return 2 * out * d["input_size"] + 8 * out + 10 * d["batch_size"]
