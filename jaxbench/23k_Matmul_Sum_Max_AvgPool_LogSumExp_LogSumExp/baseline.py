"""23k_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp: KernelBench L2 #18, Linear reduced to one value a row."""

import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "matmul_sum_max_avgpool_logsumexp_logsumexp",
    "model": "KernelBench L2",
    "operator": "matmul_sum_max_avgpool_logsumexp_logsumexp",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}
# After the row sum every op acts on a length-1 axis (the identity), and the row sum of x @ w.T + b is
# x @ sum(w, axis=0) + sum(b): a matrix-vector product. `maxkernel bench kernels` leaves this task out of fast_p.
DEGENERATE = "everything after the row sum is the identity, and the row sum of x @ w.T + b is x @ sum(w, axis=0) + sum(b)"


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[B,in], w[out,in], b[out])."""
    d = dims(CONFIG, SIZES, size)
    k1, k2, k3 = keys(seed, 3)
    x = draw(k1, (d["batch_size"], d["in_features"]), dtype, seed)
    w = weight(k2, (d["out_features"], d["in_features"]), dtype, seed, fan_in=d["in_features"])
    b = draw(k3, (d["out_features"],), dtype, seed, scale=0.5)
    return x, w, b


def _logsumexp(y, axis):
    m = jnp.max(y, axis=axis, keepdims=True)
    return m + jnp.log(jnp.sum(jnp.exp(y - m), axis=axis, keepdims=True))


def workload(x, w, b):
    """Linear, sum over features, then max, mean and two LogSumExps over the size-1 axis, in f32; [B, 1].

    As in KernelBench, everything after the sum acts on a length-1 axis and is the identity, so the result is
    the row sum of the Linear output; the ops are kept so the chain is the problem's own.
    """
    y = lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    y = jnp.sum(y + b.astype(jnp.float32), axis=1, keepdims=True)
    y = jnp.max(y, axis=1, keepdims=True)
    y = jnp.mean(y, axis=1, keepdims=True)
    y = _logsumexp(_logsumexp(y, axis=1), axis=1)
    return y.astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    out = d["batch_size"] * d["out_features"]
    return 2 * out * d["in_features"] + 2 * out + 8 * d["batch_size"]
