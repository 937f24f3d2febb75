"""rw_mhc_stream_mixing: manifold-constrained hyper-connections (DeepSeek's mHC, arXiv 2512.24880) around one
sublayer: dynamic H_pre / H_post / H_res from the RMS-normalised widened residual, H_res made doubly stochastic by
Sinkhorn-Knopp, the layer input read out and the new streams written; shapes from deepseek-ai/DeepSeek-V4-Pro's
config.json (hidden_size 7168, hc_mult 4, hc_sinkhorn_iters 20, rms_norm_eps 1e-6), a model built on mHC."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "deepseek_v4_pro_mhc_stream_mixing",
    "model": "DeepSeek-V4-Pro",
    "operator": "mhc_stream_mixing",
    "tokens": 4096,  # one 4096-token sequence per device in prefill (or a training micro-batch)
    "hc_mult": 4,  # n: residual streams
    "hidden_size": 7168,  # C: width of one stream (also DeepSeek-V3's hidden_size)
}
SIZES = {"smoke": {"tokens": 256, "hidden_size": 256}, "smoke@decode": {"tokens": 16}}
# prefill: a prompt's tokens at once; decode: one new token for each of 128 sequences in a serving batch.
CONFIGS = {"prefill": {}, "decode": {"tokens": 128}}

SINKHORN_ITERS = 20  # hc_sinkhorn_iters (also the paper's t_max)
NORM_EPS = 1e-6  # rms_norm_eps

# Independent dimensions (every token computes its own mappings from its own streams): the TPU estimator may shrink
# these and extrapolate.
PARALLEL_DIMS = ("tokens",)


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (streams[tokens, n, C], layer_out[tokens, C], phi[n*C, 2n + n*n] f32, alpha[3] f32,
    bias[2n + n*n] f32). streams is the widened residual x_l; layer_out is the sublayer's output F(.) that the post
    mapping writes back; phi, alpha and bias are the mHC projection (columns: pre n, post n, res n*n row-major),
    the gating factors (pre, post, res) and the static biases. The mHC parameters are f32 whatever `dtype` is, as
    the model stores them. phi is scaled by 1/sqrt(n*C) and alpha drawn near 1 so that the mappings' logits spread
    over a few units: H_res rows are far from uniform and vary from token to token."""
    d = dims(CONFIG, SIZES, size, CONFIGS)
    n, c = d["hc_mult"], d["hidden_size"]
    kx, kp, ka = keys(seed, 3)
    # streams with layer_out, and alpha with bias, each come from one draw (split by a jitted function compiled
    # once): fewer random programs to compile for each new seed's distribution.
    activations = draw(kx, (d["tokens"], n + 1, c), dtype, seed)
    phi = weight(kp, (n * c, 2 * n + n * n), jnp.float32, seed)
    small = draw(ka, (3 + 2 * n + n * n,), jnp.float32, seed)
    streams, layer_out, alpha, bias = _split(activations, small)
    return streams, layer_out, phi, alpha, bias


@jax.jit
def _split(activations, small):
    """(streams, layer_out) from the [tokens, n + 1, C] draw; (alpha, bias) from the small one, alpha near 1."""
    n = activations.shape[1] - 1
    return activations[:, :n], activations[:, n], 1.0 + 0.2 * small[:3], small[3:]


def _sinkhorn(logits):
    """The nearest-to-doubly-stochastic matrix of each [n, n] logit block: exp (after subtracting the block's max,
    which the first normalisation cancels), then SINKHORN_ITERS rounds of normalising columns, then rows."""
    m = jnp.exp(logits - jnp.max(logits, axis=(-2, -1), keepdims=True))

    def step(_, m):
        m = m / jnp.sum(m, axis=-2, keepdims=True)
        return m / jnp.sum(m, axis=-1, keepdims=True)

    return lax.fori_loop(0, SINKHORN_ITERS, step, m)


def workload(streams, layer_out, phi, alpha, bias):
    """mHC around one sublayer, in f32:
        x' = vec(x) / rms(vec(x))                       (RMSNorm over all n*C values; its gain is folded into phi)
        H_pre  = sigmoid(alpha_pre  * x' phi_pre  + b_pre)            [n]
        H_post = 2 sigmoid(alpha_post * x' phi_post + b_post)         [n]
        H_res  = Sinkhorn-Knopp(alpha_res * mat(x' phi_res) + b_res)  [n, n]
        layer_input = H_pre x                          (what the sublayer reads)
        new_streams = H_res x + H_post^T layer_out     (x_{l+1})
    The normalisation divides the projection's output rather than its input (the paper's fused order; the same
    result). Returns (layer_input[tokens, C], new_streams[tokens, n, C]) in the streams' dtype."""
    tokens, n, c = streams.shape
    x = streams.astype(jnp.float32)
    flat = x.reshape(tokens, n * c)
    inv_rms = lax.rsqrt(jnp.mean(flat * flat, axis=-1, keepdims=True) + NORM_EPS)
    mixes = jnp.matmul(flat, phi.astype(jnp.float32), precision=lax.Precision.HIGHEST) * inv_rms
    bias = bias.astype(jnp.float32)
    alpha = alpha.astype(jnp.float32)
    h_pre = jax.nn.sigmoid(alpha[0] * mixes[:, :n] + bias[:n])
    h_post = 2.0 * jax.nn.sigmoid(alpha[1] * mixes[:, n:2 * n] + bias[n:2 * n])
    h_res = _sinkhorn((alpha[2] * mixes[:, 2 * n:] + bias[2 * n:]).reshape(tokens, n, n))

    layer_input = jnp.einsum("ti,tic->tc", h_pre, x)
    new_streams = (jnp.einsum("tij,tjc->tic", h_res, x)
                   + h_post[:, :, None] * layer_out.astype(jnp.float32)[:, None, :])
    return layer_input.astype(streams.dtype), new_streams.astype(streams.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size, CONFIGS)
    t, n, c = d["tokens"], d["hc_mult"], d["hidden_size"]
    norm = 2 * t * n * c  # sum of squares
    projection = 2 * t * n * c * (2 * n + n * n)
    sinkhorn = t * SINKHORN_ITERS * 4 * n * n  # a sum and a divide per entry, for columns then rows
    pre = 2 * t * n * c
    res = 2 * t * n * n * c
    post = 2 * t * n * c  # a multiply and an add per stream entry
    return norm + projection + sinkhorn + pre + res + post
