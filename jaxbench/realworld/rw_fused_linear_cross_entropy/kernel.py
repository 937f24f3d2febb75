"""Pallas TPU kernels for rw_fused_linear_cross_entropy: the LM head's loss and both gradients, logits never whole.

Three kernels over (token blocks, vocabulary blocks); no [tokens, vocab] f32 array ever reaches HBM:

- stats: logits = h @ W^T block by block, f32 on the MXU; per token an online max and sum over the vocabulary give
  the log-sum-exp, and the label's logit is picked up in the block that holds it. The per-token loss is
  lse - logit[label] (0 at ignored tokens).
- grad_h: the logits again, their gradient g = (softmax - onehot(label)) / count (0 at ignored tokens) rounded to
  bf16, accumulated into dh += g @ W in an f32 scratch over the vocabulary axis, and g written out in bf16 (the
  only [tokens, vocab] array the program writes: half the bytes of XLA's f32 logits, and written once).
- grad_w: dW = g^T @ h, the token axis the reduction, in an f32 scratch.

Four matmuls of 2 * tokens * hidden * vocab FLOPs (XLA's program does three, but materialises the f32 logits of
each token chunk and their gradient); the logits are recomputed instead of stored. The vocabulary block must divide
the vocabulary (128256 = 1002 * 128: 384 and 768 do), so no block is masked.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# block_t: tokens per block; block_v: vocabulary rows per block (rounded down to a multiple of 128 dividing vocab).
TUNABLES = {"block_t": (256, 512, 1024), "block_v": (384, 768, 1536)}

IGNORE_INDEX = -100
VMEM_LIMIT = 64 * 1024 * 1024  # the f32 accumulators plus double-buffered [block, hidden] tiles pass 16 MiB
_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # a[r, c] . b[t, c] -> [r, t]
_CONTRACT_FIRST = (((0,), (0,)), ((), ()))  # a[t, r] . b[t, c] -> [r, c]


def _logits(h_ref, w_ref):
    return lax.dot_general(h_ref[...], w_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)


def _stats_kernel(h_ref, w_ref, lab_ref, loss_ref, lse_ref, m_ref, l_ref, t_ref, *, block_v):
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        t_ref[...] = jnp.zeros_like(t_ref)

    s = _logits(h_ref, w_ref)  # [block_t, block_v] f32
    col = j * block_v + lax.broadcasted_iota(jnp.int32, s.shape, 1)
    t_ref[...] += jnp.sum(jnp.where(col == lab_ref[...], s, 0.0), axis=1, keepdims=True)
    m_prev = m_ref[...]
    m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
    l_ref[...] = jnp.exp(m_prev - m_new) * l_ref[...] + jnp.sum(jnp.exp(s - m_new), axis=1, keepdims=True)
    m_ref[...] = m_new

    @pl.when(j == pl.num_programs(1) - 1)
    def _store():
        lse = m_ref[...] + jnp.log(l_ref[...])
        lse_ref[...] = lse
        loss_ref[...] = jnp.where(lab_ref[...] != IGNORE_INDEX, lse - t_ref[...], 0.0)


def _grad_h_kernel(h_ref, w_ref, lab_ref, lse_ref, scale_ref, dh_ref, g_ref, acc_ref, *, block_v):
    j = pl.program_id(1)
    s = _logits(h_ref, w_ref)
    col = j * block_v + lax.broadcasted_iota(jnp.int32, s.shape, 1)
    lab = lab_ref[...]
    # d(sum of kept losses / count) / d logits; scale_ref is 1 / count at a kept token and 0 at an ignored one
    g = ((jnp.exp(s - lse_ref[...]) - (col == lab).astype(jnp.float32)) * scale_ref[...]).astype(g_ref.dtype)
    g_ref[...] = g
    part = jnp.dot(g, w_ref[...], preferred_element_type=jnp.float32)

    @pl.when(j == 0)
    def _first():
        acc_ref[...] = part

    @pl.when(j > 0)
    def _rest():
        acc_ref[...] += part

    @pl.when(j == pl.num_programs(1) - 1)
    def _store():
        dh_ref[...] = acc_ref[...].astype(dh_ref.dtype)


def _grad_w_kernel(g_ref, h_ref, dw_ref, acc_ref):
    i = pl.program_id(1)
    part = lax.dot_general(g_ref[...], h_ref[...], _CONTRACT_FIRST, preferred_element_type=jnp.float32)

    @pl.when(i == 0)
    def _first():
        acc_ref[...] = part

    @pl.when(i > 0)
    def _rest():
        acc_ref[...] += part

    @pl.when(i == pl.num_programs(1) - 1)
    def _store():
        dw_ref[...] = acc_ref[...].astype(dw_ref.dtype)


def _block(n, want, unit):
    """The largest multiple of `unit` dividing n that is at most `want` (n itself when none is)."""
    b = (min(want, n) // unit) * unit
    while b >= unit:
        if n % b == 0:
            return b
        b -= unit
    return n


@functools.partial(jax.jit, static_argnames=("block_t", "block_v"))
def fused_linear_cross_entropy(hidden, lm_head, labels, *, block_t: int, block_v: int):
    t, d = hidden.shape
    v = lm_head.shape[0]
    if lm_head.shape[1] != d or labels.shape != (t,):
        raise ValueError(f"hidden {hidden.shape}, lm_head {lm_head.shape} and labels {labels.shape} disagree")
    if block_t <= 0 or block_v <= 0:
        raise ValueError(f"block_t={block_t} and block_v={block_v} must be positive")
    bt, bv = _block(t, block_t, 8), _block(v, block_v, 128)
    nt, nv = t // bt, v // bv
    lab = labels.astype(jnp.int32).reshape(t, 1)
    kept = lab != IGNORE_INDEX
    count = jnp.maximum(jnp.sum(kept), 1).astype(jnp.float32)
    scale = jnp.where(kept, 1.0 / count, 0.0)  # [t, 1] f32
    size = jnp.dtype(hidden.dtype).itemsize
    params = functools.partial(pltpu.CompilerParams, vmem_limit_bytes=VMEM_LIMIT)

    rows = lambda i, j: (i, 0)  # noqa: E731  a token block's [block_t, ...] rows
    vocab = lambda i, j: (j, 0)  # noqa: E731
    col = pl.BlockSpec((bt, 1), rows)
    mm = 2 * t * d * v
    losses, lse = pl.pallas_call(
        functools.partial(_stats_kernel, block_v=bv),
        out_shape=(jax.ShapeDtypeStruct((t, 1), jnp.float32),) * 2,
        grid=(nt, nv),
        in_specs=[pl.BlockSpec((bt, d), rows), pl.BlockSpec((bv, d), vocab), col],
        out_specs=(col, col),
        scratch_shapes=[pltpu.VMEM((bt, 1), jnp.float32)] * 3,
        # token blocks are independent; the vocabulary axis carries the running max and sum
        compiler_params=params(dimension_semantics=("parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(flops=mm, transcendentals=t * v, bytes_accessed=size * (t * d + nt * v * d)),
    )(hidden, lm_head, lab)

    dh, g = pl.pallas_call(
        functools.partial(_grad_h_kernel, block_v=bv),
        out_shape=(jax.ShapeDtypeStruct((t, d), hidden.dtype), jax.ShapeDtypeStruct((t, v), hidden.dtype)),
        grid=(nt, nv),
        in_specs=[pl.BlockSpec((bt, d), rows), pl.BlockSpec((bv, d), vocab), col, col, col],
        out_specs=(pl.BlockSpec((bt, d), rows), pl.BlockSpec((bt, bv), lambda i, j: (i, j))),
        scratch_shapes=[pltpu.VMEM((bt, d), jnp.float32)],
        # the vocabulary axis is dh's reduction
        compiler_params=params(dimension_semantics=("parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(flops=2 * mm, transcendentals=t * v,
                                      bytes_accessed=size * (2 * t * d + nt * v * d + t * v)),
    )(hidden, lm_head, lab, lse, scale)

    dw = pl.pallas_call(
        _grad_w_kernel,
        out_shape=jax.ShapeDtypeStruct((v, d), lm_head.dtype),
        grid=(nv, nt),
        in_specs=[pl.BlockSpec((bt, bv), lambda j, i: (i, j)), pl.BlockSpec((bt, d), lambda j, i: (i, 0))],
        out_specs=pl.BlockSpec((bv, d), lambda j, i: (j, 0)),
        scratch_shapes=[pltpu.VMEM((bv, d), jnp.float32)],
        # vocabulary blocks are independent; the token axis is the reduction
        compiler_params=params(dimension_semantics=("parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(flops=mm, transcendentals=0,
                                      bytes_accessed=size * (t * v + nv * t * d + v * d)),
    )(g, hidden)
    return losses.reshape(t), dh, dw


def workload(hidden, lm_head, labels, *, block_t: int = 512, block_v: int = 384):
    """(per-token losses [tokens] f32, dh [tokens, hidden], dW [vocab, hidden]) of the mean cross-entropy of
    hidden @ lm_head^T over the non-ignored tokens."""
    return fused_linear_cross_entropy(hidden, lm_head, labels, block_t=block_t, block_v=block_v)
