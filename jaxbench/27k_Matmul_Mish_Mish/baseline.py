"""27k_Matmul_Mish_Mish: KernelBench L2 #29, a Linear layer followed by Mish applied twice."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "matmul_mish_mish",
    "model": "KernelBench L2",
    "operator": "matmul_mish_mish",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B,in], w[out,in], b[out]); x has std 2 so both Mish branches are exercised."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3 = keys(seed, 3)
    x = draw(k1, (d["batch_size"], d["in_features"]), dtype, seed, scale=2.0)
    w = weight(k2, (d["out_features"], d["in_features"]), dtype, seed, fan_in=d["in_features"])
    b = draw(k3, (d["out_features"],), dtype, seed, scale=0.5)
    return x, w, b


def _mish(v):
    return v * jnp.tanh(jax.nn.softplus(v))


def workload(x, w, b):
    """mish(mish(x @ w.T + b)) in f32 from the f32 accumulator; result in x's dtype."""
    y = lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    return _mish(_mish(y + b.astype(jnp.float32))).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    out = d["batch_size"] * d["out_features"]
    return 2 * out * d["in_features"] + 11 * out
