"""38k_Matmul_Dropout_Softmax: KernelBench L2 #66 without its mean, softmax(dropout(x @ W^T + b)) in inference mode."""

import math

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "matmul_dropout_softmax",
    "model": "KernelBench L2",
    "operator": "matmul_dropout_softmax",
    "batch_size": 4096,
    "in_features": 8192,
    "out_features": 8192,
    "dropout_p": 0.2,
}
SIZES = {"smoke": {"batch_size": 128, "in_features": 512, "out_features": 256}}

# Std of the logits: several units, so each row's softmax has a few dominant features
# (the public suite's unit-scale logits gave near-uniform rows of ~1/8192).
LOGIT_SCALE = 3.0


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[batch_size, in_features], w[out_features, in_features] (torch Linear layout), b[out_features])."""
    d = dims(CONFIG, SIZES, size)
    kx, kw, kb = keys(seed, 3)
    x = draw(kx, (d["batch_size"], d["in_features"]), dtype, seed)
    w = draw(kw, (d["out_features"], d["in_features"]), dtype, seed, scale=LOGIT_SCALE / math.sqrt(d["in_features"]))
    b = draw(kb, (d["out_features"],), dtype, seed)
    return x, w, b


def workload(x, w, b):
    """Linear with f32 accumulation, then softmax over features in f32; result in x's dtype.

    Dropout is the identity: the benchmark measures inference, where dropout_p (kept in CONFIG) has no effect.
    KernelBench #66 also takes a keepdim mean over features before the softmax, which makes every output
    exactly 1; as in the public suite, that mean is left out.
    The logits stay f32: rounding them to bf16 (up to ~0.03 at magnitude 10) would move softmax outputs by ~3%.
    """
    z = jnp.einsum("bi,oi->bo", x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)
    return jax.nn.softmax(z, axis=-1).astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    bsz, i, o = d["batch_size"], d["in_features"], d["out_features"]
    # matmul + bias, ~4 for softmax (max, sub/exp, sum, divide) per output.
    return 2 * bsz * i * o + bsz * o * (1 + 4)
