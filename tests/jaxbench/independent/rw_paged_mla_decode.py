"""rw_paged_mla_decode: DeepSeek-V3 multi-head latent attention at decode in the absorbed form (DeepSeek-V2 report,
arXiv 2405.04434, sec. 2.1 and appendix C: W_UK folded into the query, W_UV applied after; FlashMLA's decode
interface), written by first copying each sequence's pages, one page-table entry at a time, into a contiguous
latent cache with explicit loops, then attending per sequence over only its first L - seq_q + i + 1 cached tokens
(sliced, not masked with -inf): logits = softmax_scale * q . [c_kv, k_rope] over the full 576-wide latent,
softmax_scale = (qk_nope_head_dim + qk_rope_head_dim)^-1/2 * mscale^2 with YaRN's mscale = 0.1 * mscale *
ln(factor) + 1 (DeepSeek-V3's serving past 4K), and the output the probability-weighted sum of c_kv (the first
kv_lora_rank columns, the value in latent space)."""

import math

import numpy as np

BREAKS = (
    "the page-table lookup dropped (pages read in pool order, kv_pages[arange] instead of kv_pages[page_table])",
    "the YaRN mscale^2 factor dropped from the softmax scale",
    "the length mask off by one (each row also sees the next cached position)",
)


def _softmax_scale(config):
    mscale = 0.1 * config["rope_mscale"] * math.log(config["rope_factor"]) + 1.0
    return (config["qk_nope_head_dim"] + config["qk_rope_head_dim"]) ** -0.5 * mscale ** 2


def reference(q, kv_pages, lengths, page_table, *, config):
    batch, seq_q, heads, width = q.shape
    page_size = kv_pages.shape[1]
    rank = config["kv_lora_rank"]
    pages_per_seq = page_table.shape[1]
    scale = _softmax_scale(config)
    out = np.zeros((batch, seq_q, heads, rank))
    for b in range(batch):
        cache = np.zeros((pages_per_seq * page_size, width))  # this sequence's latent cache, contiguous
        for p in range(pages_per_seq):
            cache[p * page_size:(p + 1) * page_size] = kv_pages[int(page_table[b, p])]
        length = int(lengths[b])
        for i in range(seq_q):
            seen = cache[: length - seq_q + i + 1]  # new token i sits at position length - seq_q + i
            logits = scale * (q[b, i] @ seen.T)  # [heads, tokens]
            p = np.exp(logits - logits.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            out[b, i] = p @ seen[:, :rank]
    return out
