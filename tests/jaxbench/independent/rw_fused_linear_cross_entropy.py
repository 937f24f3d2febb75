"""rw_fused_linear_cross_entropy: the LM head z_t = W h_t followed by PyTorch's cross_entropy with
ignore_index=-100 and reduction="mean" (the mean over non-ignored tokens, n of them), forward and backward, with
the gradients derived by hand rather than by autodiff: for a kept token, loss_t = logsumexp(z_t) - z_t[y_t] and
dL/dz_t = (softmax(z_t) - onehot(y_t)) / n, hence dh_t = W^T dL/dz_t and dW = sum_t dL/dz_t h_t^T (ignored tokens
contribute nothing). Written token by token in float64, the log-sum-exp from an explicit max, exp and sum, and dW
accumulated as one outer product per token, instead of the baseline's blocks of tokens differentiated by
jax.value_and_grad."""

import numpy as np

BREAKS = (
    "the mean's division by the kept-token count dropped (gradients of the summed loss)",
    "the onehot term dropped from the logits' gradient (the target logit under stop_gradient: softmax(z) alone)",
    "ignored tokens left in the per-token losses (their label read as token 0)",
)

IGNORE_INDEX = -100  # PyTorch's CrossEntropyLoss default


def reference(hidden, lm_head, labels, *, config):
    tokens, hidden_dim = hidden.shape
    vocab = lm_head.shape[0]
    assert (tokens, hidden_dim, vocab) == (config["batch_tokens"], config["hidden_dim"], config["vocab_size"])
    n = max(int(np.sum(labels != IGNORE_INDEX)), 1)
    losses = np.zeros(tokens)
    dh = np.zeros((tokens, hidden_dim))
    dw = np.zeros((vocab, hidden_dim))
    for t in range(tokens):
        y = int(labels[t])
        if y == IGNORE_INDEX:
            continue
        z = lm_head @ hidden[t]  # [vocab] logits
        m = np.max(z)
        e = np.exp(z - m)
        total = np.sum(e)
        losses[t] = m + np.log(total) - z[y]
        g = e / total  # softmax(z)
        g[y] -= 1.0  # - onehot(y)
        g /= n  # d(mean)/d(loss_t)
        dh[t] = g @ lm_head
        dw += np.outer(g, hidden[t])
    return losses, dh, dw
