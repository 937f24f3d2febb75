"""rw_moe_tgmm: the expert weight gradient of a grouped (MoE) matmul, megablox's tgmm, as its definition states it:
for each expert e, dW[e] = lhs[rows of e]^T @ grad[rows of e], where the rows are sorted by expert and expert e owns
rows sum(group_sizes[:e]) .. sum(group_sizes[:e+1]) (an expert with no rows gets zeros). Written as a plain loop over
experts, walking a running row offset through the group sizes and taking one matmul of each expert's contiguous row
range, instead of the baseline's fixed row tiles masked per expert and summed by segment."""

import numpy as np

BREAKS = (
    "each expert's first row dropped from its group (row > starts instead of row >= starts)",
    "an expert's group end moved one row on (ends = cumsum(group_sizes) + 1)",
    "the row mask dropped (a tile's rows of other experts counted in every expert it touches)",
    "each expert's last tile dropped from the work items (tile count one short)",
)


def reference(lhs, grad, group_sizes, *, config):
    experts = group_sizes.shape[0]
    rows, k_dim = lhs.shape
    n_dim = grad.shape[1]
    dw = np.zeros((experts, k_dim, n_dim))
    offset = 0
    for e in range(experts):
        size = int(group_sizes[e])
        assert size >= 0
        x_e = lhs[offset:offset + size]
        g_e = grad[offset:offset + size]
        dw[e] = x_e.T @ g_e
        offset += size
    assert offset == rows, (offset, rows)
    return dw
