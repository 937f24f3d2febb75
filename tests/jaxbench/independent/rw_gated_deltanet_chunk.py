"""rw_gated_deltanet_chunk: the gated delta rule of Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024, arXiv 2412.06464,
eq. 10) as Qwen3-Next's naive recurrent reference (fla's `recurrent_gated_delta_rule`) computes it, one token at a
time in a Python loop rather than chunk by chunk with a triangular solve: S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T)
+ beta_t v_t k_t^T, o_t = S_t q_t, alpha_t = exp(g_t), S_0 = 0, with q and k l2-normalised (x / sqrt(sum x^2 + eps))
and q scaled by key_head_dim^-1/2; value head h reads q/k head h // (num_value_heads // num_key_heads). Written as
the delta-rule error form (decay the state, read the old value S k_t, write beta_t (v_t - S k_t) k_t^T); outputs
o_1..o_T and the final state as S^T [key, value]."""

import numpy as np

L2_EPS = 1e-6  # the op's l2-normalisation epsilon (from the baseline's interface)

BREAKS = (
    "the decay gate dropped (state not multiplied by exp(g) before the update)",
    "beta dropped from the written values (u = v, not beta v)",
    "the key_head_dim^-1/2 query scale dropped",
    "the q/k head grouping tiled instead of repeat-interleaved (value head h reading head h % num_key_heads)",
)


def _l2norm(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


def reference(q, k, v, g, beta, *, config):
    batch, seq, hk, dk = q.shape
    hv, dv = v.shape[2], v.shape[3]
    group = hv // hk
    head_of = np.arange(hv) // group  # the q/k head each value head reads
    qn = _l2norm(q)[:, :, head_of, :] / np.sqrt(dk)  # [b, t, hv, dk]
    kn = _l2norm(k)[:, :, head_of, :]
    state = np.zeros((batch, hv, dv, dk))  # S: maps keys to values
    out = np.zeros((batch, seq, hv, dv))
    for t in range(seq):
        kt, qt, vt = kn[:, t], qn[:, t], v[:, t]  # [b, hv, dk], [b, hv, dk], [b, hv, dv]
        alpha = np.exp(g[:, t])[..., None, None]  # [b, hv, 1, 1]
        bt = beta[:, t][..., None]  # [b, hv, 1]
        state = alpha * state  # decay
        old = np.einsum("bhvk,bhk->bhv", state, kt)  # what the decayed state recalls for k_t
        state = state + np.einsum("bhv,bhk->bhvk", bt * (vt - old), kt)  # the delta-rule write
        out[:, t] = np.einsum("bhvk,bhk->bhv", state, qt)
    return out, np.swapaxes(state, -1, -2)
