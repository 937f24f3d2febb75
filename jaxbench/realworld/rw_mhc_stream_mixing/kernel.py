"""Pallas TPU kernel for rw_mhc_stream_mixing: mHC's whole stream mixing in one pass over each block of tokens.

The op is HBM-bound: it reads the n = 4 widened residual streams and the sublayer's output once and writes the
layer input and the n new streams once (XLA reads the streams three times: the RMS, the projection, the mixing).
A grid step holds `block_t` tokens' [n*C] streams in VMEM and:

1. sums their squares (the RMS) on the VPU, in 128-lane chunks;
2. projects them on the MXU in one bf16 pass against phi split as hi + lo (the streams are bf16, so the two halves
   give the f32 projection to about 2^-17): phi's columns are laid out so that the hi and lo halves land in lanes
   0..23 and 32..55 of one 128-lane result, res first (lanes 0..15, row-major), then pre and post;
3. runs Sinkhorn-Knopp on the 16 H_res entries of every token at once, in lanes: the entries are replicated across
   the 128 lanes (period 16), so a column sum is three lane rolls by 4, 8, 12, and a row sum three rolls by 1..3
   read back from the row's last lane;
4. mixes the streams in [8 tokens, 128 lanes] pieces with the 24 per-token coefficients broadcast once per piece
   of rows (all 24 stay in vregs while the lanes are walked).
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {"block_t": (16, 32, 64, 128)}

SINKHORN_ITERS = 20  # baseline.py SINKHORN_ITERS
NORM_EPS = 1e-6  # baseline.py NORM_EPS
SUBLANES, LANES = 8, 128
N_STREAMS = 4  # the lane layout below (16 res entries, 4 pre, 4 post) is written for hc_mult 4
RES, PRE, POST = 0, 16, 20  # first lane of each mapping in the projection's result
LO = 32  # the lo half of phi lands this many lanes after the hi half
SUM_UNROLL = 8  # chunks of the squares' sum unrolled (divides n*C / 128 at every size the task has)


def _phi_lanes(phi):
    """[n*C, 128] bf16: phi's columns as (res, pre, post), its hi half in lanes 0..23, its lo half in 32..55."""
    n = N_STREAMS
    cols = jnp.concatenate([phi[:, 2 * n:], phi[:, :2 * n]], axis=1).astype(jnp.float32)  # res, pre, post
    hi = cols.astype(jnp.bfloat16)
    lo = (cols - hi.astype(jnp.float32)).astype(jnp.bfloat16)
    width = cols.shape[1]
    return jnp.pad(jnp.concatenate([hi, jnp.zeros((phi.shape[0], LO - width), jnp.bfloat16), lo], axis=1),
                   ((0, 0), (0, LANES - LO - width)))


def _gates(alpha, bias):
    """[8, 128] f32: row 0 each lane's gating factor, row 1 its bias, in the projection's lane layout."""
    n = N_STREAMS
    a = jnp.concatenate([jnp.full((n * n,), alpha[2]), jnp.full((n,), alpha[0]), jnp.full((n,), alpha[1])])
    b = jnp.concatenate([bias[2 * n:], bias[:n], bias[n:2 * n]])
    width = a.shape[0]
    rows = jnp.stack([a, b]).astype(jnp.float32)
    return jnp.pad(rows, ((0, SUBLANES - 2), (0, LANES - width)))


def _sinkhorn_lanes(z, lane):
    """Sinkhorn-Knopp on each row's lanes 0..15 (a row-major [4, 4] block), returned replicated with period 16."""
    valid = lane < RES + 16
    zmax = jnp.max(jnp.where(valid, z, -jnp.inf), axis=-1, keepdims=True)
    m = jnp.where(valid, jnp.exp(z - zmax), 0.0)
    for shift in (16, 32, 64):  # lanes 0..15 copied across all 128
        m = m + pltpu.roll(m, shift, 1)
    pos = lane % 4

    def step(_, m):
        col = m + pltpu.roll(m, 4, 1) + pltpu.roll(m, 8, 1) + pltpu.roll(m, 12, 1)  # same column j = lane % 4
        m = m / col
        tail = m + pltpu.roll(m, 1, 1) + pltpu.roll(m, 2, 1) + pltpu.roll(m, 3, 1)  # a row's sum at its lane 3
        row = jnp.where(pos == 3, tail, jnp.where(pos == 2, pltpu.roll(tail, LANES - 1, 1),
                                                  jnp.where(pos == 1, pltpu.roll(tail, LANES - 2, 1),
                                                            pltpu.roll(tail, LANES - 3, 1))))
        return m / row

    return lax.fori_loop(0, SINKHORN_ITERS, step, m)


def _mhc_kernel(x_ref, out_ref, phi_ref, gates_ref, li_ref, ns_ref, h_ref, *, chans):
    # x_ref: [bt, n*C] streams; out_ref: [bt, C] the sublayer's output; phi_ref: [n*C, 128] bf16 (_phi_lanes);
    # gates_ref: [8, 128] f32 (_gates); li_ref: [bt, C]; ns_ref: [bt, n*C]; h_ref: [bt, 128] f32 scratch holding
    # each token's coefficients (res in lanes 0..15, pre 16..19, post 20..23).
    bt, width = x_ref.shape
    n = N_STREAMS

    def squares(c, acc):
        x = x_ref[:, pl.ds(pl.multiple_of(c * LANES, LANES), LANES)].astype(jnp.float32)
        return acc + x * x

    acc = lax.fori_loop(0, width // LANES, squares, jnp.zeros((bt, LANES), jnp.float32), unroll=SUM_UNROLL)
    inv_rms = lax.rsqrt(jnp.sum(acc, axis=-1, keepdims=True) / width + NORM_EPS)

    proj = jnp.dot(x_ref[...], phi_ref[...], preferred_element_type=jnp.float32)  # [bt, 128]
    mixes = (proj + pltpu.roll(proj, LANES - LO, 1)) * inv_rms  # hi + lo, in lanes 0..23
    gates = gates_ref[...]
    z = gates[0:1, :] * mixes + gates[1:2, :]
    lane = lax.broadcasted_iota(jnp.int32, (bt, LANES), 1)
    sig = jax.nn.sigmoid(z)
    res = _sinkhorn_lanes(z, lane)
    h_ref[...] = jnp.where(lane < PRE, res, jnp.where(lane < POST, sig, jnp.where(lane < POST + n, 2.0 * sig, 0.0)))

    def rows(r, carry):
        rs = pl.ds(pl.multiple_of(r * SUBLANES, SUBLANES), SUBLANES)
        h = h_ref[rs, :]
        coef = [jnp.broadcast_to(h[:, k:k + 1], (SUBLANES, LANES)) for k in range(POST + n)]

        def piece(c, carry):
            col = pl.multiple_of(c * LANES, LANES)
            xs = [x_ref[rs, pl.ds(pl.multiple_of(i * chans + col, LANES), LANES)].astype(jnp.float32)
                  for i in range(n)]
            out = out_ref[rs, pl.ds(col, LANES)].astype(jnp.float32)
            li = coef[PRE] * xs[0]
            for i in range(1, n):
                li = li + coef[PRE + i] * xs[i]
            li_ref[rs, pl.ds(col, LANES)] = li.astype(li_ref.dtype)
            for i in range(n):
                acc = coef[POST + i] * out
                for j in range(n):
                    acc = acc + coef[RES + i * n + j] * xs[j]
                ns_ref[rs, pl.ds(pl.multiple_of(i * chans + col, LANES), LANES)] = acc.astype(ns_ref.dtype)
            return carry

        return lax.fori_loop(0, chans // LANES, piece, carry, unroll=2)

    lax.fori_loop(0, bt // SUBLANES, rows, 0)


@functools.partial(jax.jit, static_argnames=tuple(TUNABLES))
def workload(
    streams: jax.Array,  # [tokens, n, C]
    layer_out: jax.Array,  # [tokens, C]
    phi: jax.Array,  # [n*C, 2n + n*n] f32: pre, post, res (row-major) columns
    alpha: jax.Array,  # [3] f32: pre, post, res gating factors
    bias: jax.Array,  # [2n + n*n] f32
    *,
    block_t: int = 64,
):  # -> (layer_input [tokens, C], new_streams [tokens, n, C]) in the streams' dtype
    tokens, n, chans = streams.shape
    if n != N_STREAMS:
        raise ValueError(f"hc_mult={n}: this kernel's lane layout is written for {N_STREAMS} streams")
    if chans % LANES:
        raise ValueError(f"hidden_size={chans} must be a multiple of {LANES}")
    if (n * chans // LANES) % SUM_UNROLL:
        raise ValueError(f"n * hidden_size / {LANES} must be a multiple of {SUM_UNROLL}")
    bt = min(block_t, tokens)
    if tokens % bt or bt % SUBLANES:
        raise ValueError(f"block_t={bt} must divide tokens={tokens} and be a multiple of {SUBLANES}")
    if layer_out.shape != (tokens, chans) or phi.shape != (n * chans, 2 * n + n * n):
        raise ValueError(f"layer_out {layer_out.shape} / phi {phi.shape} do not match streams {streams.shape}")
    width = n * chans
    x2 = streams.reshape(tokens, width)
    size = jnp.dtype(streams.dtype).itemsize
    cost = pl.CostEstimate(
        flops=tokens * (2 * width * LANES + 2 * width + 2 * width + 2 * n * width + 2 * width),
        transcendentals=tokens * LANES * 2,
        bytes_accessed=size * tokens * (2 * width + 2 * chans) + 2 * width * LANES,
    )
    blocks = 2 * size * bt * (2 * width + 2 * chans) + 2 * 2 * width * LANES + 4 * bt * LANES
    li, ns = pl.pallas_call(
        functools.partial(_mhc_kernel, chans=chans),
        out_shape=(jax.ShapeDtypeStruct((tokens, chans), streams.dtype),
                   jax.ShapeDtypeStruct((tokens, width), streams.dtype)),
        grid=(tokens // bt,),
        in_specs=[
            pl.BlockSpec((bt, width), lambda t: (t, 0)),
            pl.BlockSpec((bt, chans), lambda t: (t, 0)),
            pl.BlockSpec((width, LANES), lambda t: (0, 0)),
            pl.BlockSpec((SUBLANES, LANES), lambda t: (0, 0)),
        ],
        out_specs=[
            pl.BlockSpec((bt, chans), lambda t: (t, 0)),
            pl.BlockSpec((bt, width), lambda t: (t, 0)),
        ],
        scratch_shapes=[pltpu.VMEM((bt, LANES), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",),
                                             vmem_limit_bytes=int(min(max(blocks * 5 // 4 + (4 << 20), 16 << 20),
                                                                      100 << 20))),
        cost_estimate=cost,
        interpret=False,
    )(x2, layer_out, _phi_lanes(phi), _gates(alpha, bias))
    return li, ns.reshape(tokens, n, chans)
