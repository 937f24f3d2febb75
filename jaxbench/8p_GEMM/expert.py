"""Expert baseline for 8p_GEMM: the TPU matmul kernel jax ships (jax.experimental.pallas.ops.tpu.matmul), called
with the task's shapes. Not our kernel: the column ours is compared with."""

from jax.experimental.pallas.ops.tpu import matmul as library


def _block(n: int, want: int) -> int:
    """The largest of want, want/2, ... 128 that divides n; n itself when none does (a block may be the whole dim)."""
    while want >= 128:
        if n % want == 0:
            return want
        want //= 2
    return n


def workload(a, b):
    """a[M, K] @ b[K, N], f32 accumulation, out in a's dtype. 512 x 512 tiles with block_k 512: the largest that fit
    the library kernel's default scoped VMEM (it sets no limit of its own)."""
    (m, k), n = a.shape, b.shape[1]
    return library.matmul(a, b, block_shape=(_block(m, 512), _block(n, 512)), block_k=_block(k, 512))
