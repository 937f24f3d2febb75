"""rw_topk_topp_sampling_mask: vLLM's top-k then top-p filtering (its apply_top_k_top_p: keep each request's k largest
logits, then of those, by the softmax over the top k, the smallest highest-ranked prefix whose probability mass
reaches p, the top token always kept) followed by the softmax over the kept tokens, 0 at the filtered ones. Written
per request in a Python loop over rows: sort that row descending, take its first k, softmax them, walk the ranks
accumulating probability until the mass reaches p, then renormalise over exactly those token ids (scattered back by
id), instead of the baseline's whole-batch sort, thresholds and logit comparisons. The inputs' top K_MAX + 1 logits
are strictly apart and p sits mid-step of the cumulative sum (see create_inputs), so the kept set has no ties or
boundary cases and `check` compares it exactly, then the kept probabilities within the default tolerance."""

import numpy as np

BREAKS = (
    "the top-p boundary made to keep one token too many (kept + 1)",
    "top-k dropped (top-p taken over the whole row's softmax)",
    "the k-th largest dropped from the top-k set (desc > kth instead of >=)",
    "the top-p boundary made to stop before the token whose mass reaches p (above + q < p)",
    "the final softmax left unnormalised (w returned without dividing by its sum)",
)

TOLERANCE = 2e-4


def reference(logits, top_k, top_p, *, config):
    batch, vocab = logits.shape
    out = np.zeros((batch, vocab))
    for b in range(batch):
        row = logits[b]
        order = np.argsort(-row, kind="stable")  # token ids, largest logit first
        k = min(max(int(top_k[b]), 1), vocab)
        top = order[:k]
        e = np.exp(row[top] - row[top[0]])
        q = e / e.sum()
        kept = 0
        mass = 0.0
        while kept < k:  # keep ranks until the kept mass reaches p (the first token always)
            mass += q[kept]
            kept += 1
            if mass >= top_p[b]:
                break
        ids = top[:kept]
        w = np.exp(row[ids] - row[ids[0]])
        out[b, ids] = w / w.sum()
    return out


def check(got, want, config):
    (g,), (w,) = got, want
    assert g.shape == w.shape, (g.shape, w.shape)
    kept_g, kept_w = g > 0, w > 0
    bad = np.nonzero(np.any(kept_g != kept_w, axis=-1))[0]
    assert bad.size == 0, (f"kept sets differ in rows {bad.tolist()}: kept counts got "
                           f"{kept_g.sum(-1)[bad].tolist()}, want {kept_w.sum(-1)[bad].tolist()}")
    err = float(np.max(np.abs(g - w))) / float(np.max(np.abs(w)))
    assert err <= TOLERANCE, f"kept probabilities: error {err:.3g} of max|ref| > {TOLERANCE}"
