"""Pallas TPU kernel for 15p_RetNet_Retention: parallel retention with per-head decay, blocked like flash attention.

Grid (batch, head, block pair): the last axis walks only the (q block, kv block) pairs on or below the
diagonal (tables in SMEM by scalar prefetch), is "arbitrary" and carries an f32 [block_q, head_dim] accumulator
in VMEM. Each step forms the [block_q, block_k] scores on the MXU (bf16 in, f32 out), scales them by the decay
gamma^(n - m) (computed in f32, zero above the diagonal), rounds them to the input dtype as the baseline does and
adds their product with v. Blocks wholly above the diagonal are never visited; each q block's last pair
applies RetNet's per-row group norm and stores the output tile.
"""

import functools
import math

import jax
import numpy as np
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {
    "block_q": (128, 256, 512, 1024),
    "block_k": (128, 256, 512, 1024),
}

EPS = 1e-6
SUBLANES, LANES = 8, 128
_NT = (((1,), (1,)), ((), ()))  # q[bq, d] . k[bk, d] -> [bq, bk]


def _fit(extent, block, align, name):
    block = min(block, extent)
    if extent % block or (block != extent and block % align):
        raise ValueError(f"{name}={block} must divide {extent} and be a multiple of {align} (or all of it)")
    return block


def _retention_kernel(qtab_ref, ktab_ref, last_ref, lg_ref, q_ref, k_ref, v_ref, o_ref, acc_ref, *, scale,
                      block_q, block_k):
    # The grid's last axis walks only the (q block, kv block) pairs on or below the diagonal, q block major:
    # qtab_ref / ktab_ref / last_ref: [pairs] int32 (SMEM) give each step's q block, kv block and whether it is
    # that q block's last. lg_ref: [8, 128] f32, this head's log(gamma) broadcast; q_ref / o_ref: [block_q, D];
    # k_ref / v_ref: [block_k, D]; acc_ref: [block_q, D] f32.
    t = pl.program_id(2)
    qi, kj = qtab_ref[t], ktab_ref[t]

    @pl.when(kj == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    s = lax.dot_general(q_ref[...], k_ref[...], _NT, preferred_element_type=jnp.float32) * scale
    rows = qi * block_q + lax.broadcasted_iota(jnp.int32, s.shape, 0)
    cols = kj * block_k + lax.broadcasted_iota(jnp.int32, s.shape, 1)
    # exp of -inf above the diagonal gives exact zeros (as the baseline); a select is cheap next to the exp.
    log_decay = jnp.where(rows >= cols, lg_ref[0:1, 0:1] * (rows - cols).astype(jnp.float32), -jnp.inf)
    p = (s * jnp.exp(log_decay)).astype(v_ref.dtype)
    acc_ref[...] += jnp.dot(p, v_ref[...], preferred_element_type=jnp.float32)

    @pl.when(last_ref[t] == 1)
    def _store():
        out = acc_ref[...]
        centred = out - jnp.mean(out, axis=-1, keepdims=True)
        var = jnp.mean(centred * centred, axis=-1, keepdims=True)
        o_ref[...] = (centred * lax.rsqrt(var + EPS)).astype(o_ref.dtype)


def _pairs(nq, bq, bk):
    """The (q block, kv block) pairs with any n >= m, q block major, and a flag on each q block's last pair."""
    qs, ks, last = [], [], []
    for i in range(nq):
        top = ((i + 1) * bq - 1) // bk
        for j in range(top + 1):
            qs.append(i)
            ks.append(j)
            last.append(int(j == top))
    return (np.asarray(qs, np.int32), np.asarray(ks, np.int32), np.asarray(last, np.int32))


@functools.partial(jax.jit, static_argnames=("block_q", "block_k"))
def workload(q, k, v, *, block_q: int = 512, block_k: int = 512):
    """GroupNorm_head(((q k^T / sqrt(d)) * D) v), D[n, m] = gamma_h^(n - m) for n >= m, else 0."""
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k, v shapes differ: {q.shape}, {k.shape}, {v.shape}")
    batch, heads, seq_len, head_dim = q.shape
    bq = _fit(seq_len, block_q, SUBLANES, "block_q")
    bk = _fit(seq_len, block_k, LANES, "block_k")
    qtab, ktab, last = _pairs(seq_len // bq, bq, bk)
    steps = int(qtab.shape[0])
    # log(gamma) per head, as the baseline's decay_log, broadcast to one [8, 128] tile per head (a block per head,
    # so the program is the same whatever the number of heads).
    lg = jnp.log1p(-jnp.exp2(-5.0 - jnp.arange(heads, dtype=jnp.float32)))
    lg = jnp.broadcast_to(lg[:, None, None], (heads, SUBLANES, LANES))

    size = jnp.dtype(q.dtype).itemsize
    pairs = batch * heads * seq_len * seq_len // 2
    cost = pl.CostEstimate(flops=4 * pairs * head_dim, transcendentals=pairs,
                           bytes_accessed=size * (2 * q.size + 2 * batch * heads * steps * bk * head_dim))
    kernel = functools.partial(_retention_kernel, scale=1.0 / math.sqrt(head_dim), block_q=bq, block_k=bk)
    need = 2 * size * (2 * bq * head_dim + 2 * bk * head_dim) + 4 * bq * head_dim + 3 * 4 * bq * bk
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=3,
        grid=(batch, heads, steps),
        in_specs=[
            pl.BlockSpec((None, SUBLANES, LANES), lambda b, h, t, qt, kt, lt: (h, 0, 0)),
            pl.BlockSpec((None, None, bq, head_dim), lambda b, h, t, qt, kt, lt: (b, h, qt[t], 0)),
            pl.BlockSpec((None, None, bk, head_dim), lambda b, h, t, qt, kt, lt: (b, h, kt[t], 0)),
            pl.BlockSpec((None, None, bk, head_dim), lambda b, h, t, qt, kt, lt: (b, h, kt[t], 0)),
        ],
        out_specs=pl.BlockSpec((None, None, bq, head_dim), lambda b, h, t, qt, kt, lt: (b, h, qt[t], 0)),
        scratch_shapes=[pltpu.VMEM((bq, head_dim), jnp.float32)],
    )
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=grid_spec,
        # The pair axis carries the accumulator; batch and heads are independent.
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=int(min(max(need * 3 // 2, 32 << 20), 100 << 20))),
        cost_estimate=cost,
    )(jnp.asarray(qtab), jnp.asarray(ktab), jnp.asarray(last), lg, q, k, v)
