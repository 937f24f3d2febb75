"""rw_moe_permute_unpermute: MoE token dispatch and combine as DeepSeek-V3's MoE layer defines it (each token sent to
its num_experts_per_tok routed experts, each expert's output weighted by that expert's gate and summed back per
token; DeepEP's dispatch lays the copies out expert by expert, within an expert in token order). Written as explicit
Python loops over tokens and their choices, not a sort and gathers: first count each expert's copies to place its
block of rows, then walk the tokens in order, copying token t's row into the next free row of each chosen expert's
block, apply the stand-in expert transform (x * expert_scale[e]) to every row of expert e, then walk the tokens
again adding gate[t, j] * (the row its j-th copy landed in) to combined[t]. Outputs (combined, permuted)."""

import numpy as np

BREAKS = (
    "the combine weights dropped (copies summed unweighted)",
    "the dispatch sort made to copy the wrong token (order // k replaced by order % tokens)",
    "each copy scaled by its token's slot's expert scale in unsorted order (sorted_ids replaced by flat_ids)",
)


def reference(x, expert_ids, weights, expert_scale, *, config):
    tokens, top_k = expert_ids.shape
    experts = expert_scale.shape[0]
    count = np.zeros(experts, dtype=np.int64)
    for t in range(tokens):
        for j in range(top_k):
            count[expert_ids[t, j]] += 1
    start = np.concatenate([[0], np.cumsum(count)[:-1]])  # first row of each expert's block
    fill = start.copy()

    permuted = np.zeros((tokens * top_k, x.shape[1]))
    landed = np.zeros((tokens, top_k), dtype=np.int64)  # the row each (token, choice) copy went to
    row_expert = np.zeros(tokens * top_k, dtype=np.int64)
    for t in range(tokens):
        for j in range(top_k):
            e = int(expert_ids[t, j])
            r = fill[e]
            fill[e] += 1
            permuted[r] = x[t]
            landed[t, j] = r
            row_expert[r] = e
    assert np.array_equal(fill, start + count)

    expert_out = np.zeros_like(permuted)
    for e in range(experts):  # the per-expert transform over that expert's block of rows
        rows = slice(start[e], start[e] + count[e])
        assert np.all(row_expert[rows] == e)
        expert_out[rows] = permuted[rows] * expert_scale[e]

    combined = np.zeros_like(x)
    for t in range(tokens):
        for j in range(top_k):
            combined[t] += weights[t, j] * expert_out[landed[t, j]]
    return combined, permuted
