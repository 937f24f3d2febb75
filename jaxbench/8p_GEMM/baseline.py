"""8p_GEMM: the Llama-3.1-70B MLP up-projection as one dense matmul, a[M,K] @ b[K,N] in the inputs' dtype."""

import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "llama3_70b_gemm",
    "model": "Llama-3.1-70B",
    "operator": "gemm",
    "M": 8192,
    "K": 8192,
    "N": 28672,
}
SIZES = {"smoke": {"M": 256, "K": 512, "N": 384}}

# Independent dimensions (rows and columns of the output are independent): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("M", "N")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (a[M,K], b[K,N]); b is scaled by 1/sqrt(K) so outputs are O(1)."""
    d = dims(CONFIG, SIZES, size)
    k1, k2 = keys(seed, 2)
    a = draw(k1, (d["M"], d["K"]), dtype, seed)
    b = draw(k2, (d["K"], d["N"]), dtype, seed, scale=d["K"] ** -0.5)
    return a, b


def workload(a, b):
    """a @ b with f32 accumulation, returned in the inputs' dtype."""
    return jnp.matmul(a, b, preferred_element_type=jnp.float32).astype(a.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    return 2 * d["M"] * d["K"] * d["N"]
