"""Pallas TPU kernel for 16p_Mamba2_SSD: Mamba-2's chunked state-space-duality scan.

Grid (batch, head group, chunk); the chunk axis is "arbitrary" and carries each head's [d_state, head_dim] f32 state
in VMEM scratch from one chunk to the next. Per step: C.B^T for the chunk on the MXU (shared by the group's heads),
then per head the masked, decayed quadratic form (weights rounded to the input dtype, as the baseline does), the
entering state read out by C (an f32 product, as a hi/lo bf16 pair on the MXU), the D skip, and the chunk's own
state contribution, after which the state is decayed through the chunk and updated.
The prologue in XLA is elementwise on [batch, seq, heads] (softplus, the per-chunk cumulative sum of dt * A) plus
small layout moves of dt, the cumulative sum and B.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# heads_per_step: heads handled (a static loop) by one grid step; C.B^T is computed once for them.
TUNABLES = {"heads_per_step": (8, 16, 32)}

CHUNK = 256
SUBLANES = 8
_HI_MASK = 0xFFFF0000


def _chunk_size(seq_len):
    return min(CHUNK, max(seq_len // 4, 1))


def _dot(a, b):
    return jnp.dot(a, b, preferred_element_type=jnp.float32)


def _ssd_kernel(skip_ref, cum_ref, dt_ref, x_ref, c_ref, bt_ref, y_ref, state_ref, *, heads, q):
    # skip_ref: [H] f32 (SMEM); cum_ref / dt_ref: [heads, q] f32 (cumulative dt*A inside the chunk, softplus(dt));
    # x_ref / y_ref: [q, heads, P]; c_ref: [q, N]; bt_ref: [N, q] (B transposed); state_ref: [heads, N, P] f32.
    g, ci = pl.program_id(1), pl.program_id(2)

    @pl.when(ci == 0)
    def _init():
        state_ref[...] = jnp.zeros_like(state_ref)

    cmat = c_ref[...]
    bt = bt_ref[...]
    cb = _dot(cmat, bt)  # [q(t), q(s)] f32
    cum_rows = cum_ref[...]  # [heads, q]
    dt_rows = dt_ref[...]
    cum_cols = cum_rows.T  # [q, heads]
    dt_cols = dt_rows.T
    t_idx = lax.broadcasted_iota(jnp.int32, (q, q), 0)
    s_idx = lax.broadcasted_iota(jnp.int32, (q, q), 1)
    causal = t_idx >= s_idx
    dtype = x_ref.dtype

    for hh in range(heads):
        cum_row, dt_row = cum_rows[hh:hh + 1, :], dt_rows[hh:hh + 1, :]  # [1, q]
        cum_col, dt_col = cum_cols[:, hh:hh + 1], dt_cols[:, hh:hh + 1]  # [q, 1]
        total = cum_row[:, q - 1:q]  # [1, 1]
        x = x_ref[:, hh, :]  # [q, P]
        xf = x.astype(jnp.float32)

        # Within the chunk: (C_t . B_s) exp(cum_t - cum_s) dt_s for s <= t.
        decay = jnp.exp(jnp.where(causal, cum_col - cum_row, -jnp.inf))
        weights = (cb * decay * dt_row).astype(dtype)
        y = _dot(weights, x)

        # The entering state read out by C, in f32: C is exact in bf16, the state is split into hi + lo bf16 parts.
        st = state_ref[hh]  # [N, P] f32
        hi = pltpu.bitcast(pltpu.bitcast(st, jnp.uint32) & jnp.uint32(_HI_MASK), jnp.float32)
        lo = st - hi
        readout = _dot(cmat, hi.astype(dtype)) + _dot(cmat, lo.astype(dtype))
        y = y + readout * jnp.exp(cum_col)
        y = y + skip_ref[g * heads + hh] * xf
        y_ref[:, hh, :] = y.astype(y_ref.dtype)

        # This chunk's contribution to the state at its end, and the state carried through the chunk.
        to_end = jnp.exp(total - cum_col) * dt_col  # [q, 1]
        xw = (xf * to_end).astype(dtype)
        state_ref[hh] = jnp.exp(total) * st + _dot(bt, xw)


@functools.partial(jax.jit, static_argnames=("heads_per_step",))
def workload(x, dt, a_log, bmat, cmat, skip, *, heads_per_step: int = 8):
    """y_t = sum_{s<=t} (C_t . B_s) exp(sum_{s<r<=t} dt_r A) dt_s x_s + D x_t, chunk by chunk."""
    b, s, h, p = x.shape
    n = bmat.shape[-1]
    q = _chunk_size(s)
    if s % q:
        raise ValueError(f"seq_len {s} is not a multiple of the chunk size {q}")
    nc = s // q
    hb = min(heads_per_step, h)
    if h % hb or (hb != h and hb % SUBLANES):
        raise ValueError(f"heads_per_step={hb} must divide num_heads={h} and be a multiple of {SUBLANES}")
    f32 = jnp.float32

    # Elementwise prologue on [b, s, h] (as the baseline) and layout moves of the small per-step vectors.
    dtf = jax.nn.softplus(dt.astype(f32))
    a = dtf * -jnp.exp(a_log.astype(f32))
    cum = jnp.cumsum(a.reshape(b, nc, q, h), axis=2)  # [b, c, q, h]
    cum_t = jnp.transpose(cum, (0, 1, 3, 2))  # [b, c, h, q]
    dt_t = jnp.transpose(dtf.reshape(b, nc, q, h), (0, 1, 3, 2))
    bt = jnp.transpose(bmat.reshape(b, nc, q, n), (0, 1, 3, 2))  # [b, c, N, q]
    skip_f = skip.astype(f32)

    isz = jnp.dtype(x.dtype).itemsize
    flops = 2 * b * s * q * n + b * h * nc * (2 * q * q * p + 3 * 2 * q * n * p)
    cost = pl.CostEstimate(flops=flops, transcendentals=b * h * s * (q + 3),
                           bytes_accessed=2 * x.size * isz + (h // hb) * 2 * b * s * n * isz + 2 * 4 * b * s * h)
    kernel = functools.partial(_ssd_kernel, heads=hb, q=q)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(b, h // hb, nc),
        in_specs=[
            pl.BlockSpec(memory_space=pltpu.SMEM),
            pl.BlockSpec((None, None, hb, q), lambda bi, g, c: (bi, c, g, 0)),
            pl.BlockSpec((None, None, hb, q), lambda bi, g, c: (bi, c, g, 0)),
            pl.BlockSpec((None, q, hb, p), lambda bi, g, c: (bi, c, g, 0)),
            pl.BlockSpec((None, q, n), lambda bi, g, c: (bi, c, 0)),
            pl.BlockSpec((None, None, n, q), lambda bi, g, c: (bi, c, 0, 0)),
        ],
        out_specs=pl.BlockSpec((None, q, hb, p), lambda bi, g, c: (bi, c, g, 0)),
        scratch_shapes=[pltpu.VMEM((hb, n, p), f32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=48 << 20),
        cost_estimate=cost,
    )(skip_f, cum_t, dt_t, x, cmat, bt)
