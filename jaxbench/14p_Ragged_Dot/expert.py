"""Expert baseline for 14p_Ragged_Dot: megablox's grouped matmul (jax.experimental.pallas.ops.tpu.megablox.gmm),
called with the task's shapes. Not our kernel: the column ours is compared with."""

from jax.experimental.pallas.ops.tpu.megablox import gmm


def _block(n: int, want: int) -> int:
    """The largest of want, want/2, ... 128 that divides n; n itself when none does (a block may be the whole dim)."""
    while want >= 128:
        if n % want == 0:
            return want
        want //= 2
    return n


def workload(lhs, rhs, group_sizes):
    """lhs[M, K] rows grouped by group_sizes, times rhs[g][K, N]; f32 accumulation, out in lhs's dtype."""
    (m, k), n = lhs.shape, rhs.shape[2]
    tiling = (_block(m, 512), _block(k, 1024), _block(n, 1024))
    return gmm(lhs, rhs, group_sizes, preferred_element_type=lhs.dtype, tiling=tiling)
