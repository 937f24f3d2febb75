"""rw_causal_conv1d: Mamba's causal depthwise conv1d with SiLU as the mamba-ssm / causal-conv1d reference code
defines it for decoding (causal_conv1d_update_ref): a rolling conv state of the last width - 1 inputs per channel;
each new token is appended to the state's window, the output is silu(bias + sum_j weight[:, j] * window[j]) (the
last tap on the newest input, F.conv1d's cross-correlation), and the window's oldest entry is dropped. Written as a
token-by-token loop that carries and shifts the state (a prefill chunk is the same update run once per token, as
causal_conv1d_ref with initial_states is), each step one dot of the window with the taps, instead of the
baseline's whole-sequence shifted slices summed tap by tap; the new state is what the loop carries at the end."""

import numpy as np

BREAKS = (
    "the conv bias dropped from the pre-activation",
    "the SiLU dropped (y = the raw conv output)",
    "the taps reversed (conv_weight[:, W - 1 - j] on u_{t - (W-1) + j}: the first tap on the newest input)",
    "the new conv state taken one row early (u[:, s - 1:-1]: the newest input lost, an old one kept)",
)


def reference(x, conv_state, conv_weight, bias, *, config):
    batch, seq, channels = x.shape
    width = config["conv_width"]
    assert conv_weight.shape == (channels, width) and conv_state.shape == (batch, width - 1, channels)
    state = conv_state.copy()  # [batch, width - 1, channels], oldest first
    y = np.zeros((batch, seq, channels))
    for t in range(seq):
        window = np.concatenate([state, x[:, t:t + 1, :]], axis=1)  # [batch, width, channels], newest last
        pre = np.einsum("bjc,cj->bc", window, conv_weight) + bias
        y[:, t, :] = pre / (1.0 + np.exp(-pre))  # silu(z) = z * sigmoid(z)
        state = window[:, 1:, :]  # roll: drop the oldest input
    return y, state
