"""rw_rl_logprob_entropy: the per-token log-probability of the sampled token and the entropy of the policy's
distribution, as GRPO/PPO trainers (verl's logprobs_from_logits and entropy_from_logits) define them from the
temperature-scaled logits z = logits / T: log p = log_softmax(z), logprob = log p[token], entropy = -sum p log p.
Written per row with an explicit max and log-sum-exp (lse = m + log sum exp(z - m)), the log-softmax formed first
and the entropy taken as -sum(p * log p) with p = exp(log p), instead of the baseline's lse - sum(p * z)."""

import numpy as np

BREAKS = (
    "the max-subtraction's partner dropped (lse = log sum exp(z - m), m never added back)",
    "the entropy's sign flipped",
    "the temperature dropped from the logits",
)

TEMPERATURE = 0.7  # the rollout's sampling temperature (Qwen2.5-7B-Instruct's generation_config.json)


def reference(logits, token_ids, *, config):
    tokens, vocab = logits.shape
    logprob = np.zeros(tokens)
    entropy = np.zeros(tokens)
    for i in range(tokens):
        z = logits[i] / TEMPERATURE
        m = np.max(z)
        lse = m + np.log(np.sum(np.exp(z - m)))
        logp = z - lse
        p = np.exp(logp)
        logprob[i] = logp[token_ids[i]]
        entropy[i] = -np.sum(p * logp)
    return logprob, entropy
