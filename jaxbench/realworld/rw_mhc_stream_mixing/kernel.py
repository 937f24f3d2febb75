"""Pallas TPU kernel for rw_mhc_stream_mixing: mHC's whole stream mixing in one pass over each block of tokens.

The op is HBM-bound: it reads the n = 4 widened residual streams and the sublayer's output once and writes the
layer input and the n new streams once. Two layout facts shape the kernel:

- The streams stay in their own [tokens, n, C] layout (on a TPU its tiles are 4 streams x 128 channels of one
  token). Viewing them as [tokens, n*C], as this kernel's first version did, costs XLA a relayout copy of the
  streams in and of the new streams out, together about as long as the kernel (read from the static profile's
  per-op cycles, not from the kernel's own). Here the block is [bt, n, C] and the kernel reads it as [bt*n, C]
  rows (row 4t + j is token t's stream j), a reshape that moves nothing in VMEM.
- On those rows the mixing is a block-diagonal matmul: for a group of 32 tokens (128 rows), new streams =
  M_res [128, 128] @ X + M_post [128, 32] @ layer_out and layer input = M_pre [32, 128] @ X, where M_res holds
  each token's 4 x 4 H_res on its diagonal. The MXU does in a few passes what would be 24 broadcast multiply-adds
  per element on the VPU. The coefficients go to the MXU as bf16 (f32 accumulation; the streams are bf16 already).

A grid step holds `bt` tokens and:

1. sums the squares of each row on the VPU in 128-lane chunks (the RMS);
2. projects the rows on the MXU (bf16, f32 accumulation) against phi transposed into four 32-lane slots, slot j
   holding stream j's 24 columns (pre, post, res); each row keeps its own stream's slot, carrying its sum of
   squares in lane 24, and four sublane-strided reads (rows j, j + 4, ...) sum a token's four rows;
3. runs Sinkhorn-Knopp on the 16 H_res entries of every token at once, in lanes: the entries are replicated across
   the 128 lanes (period 16), so a column sum is three lane rolls by 4, 8, 12, and a row sum three rolls by 1..3
   read back from the row's last lane;
4. writes each token's coefficients onto its four rows (strided stores), masks them into each group's M_res,
   M_pre and M_post, and mixes on the MXU, two groups a step.

libtpu's static profiler (the TPU estimate) rejects a matmul whose bf16 operand comes straight from vector
registers ("LLO_CHECK ... Expected vector-f32, got vector-bf16packed"), so the coefficient matrices go through a
VMEM scratch; and it cannot profile an SMEM operand's DMA, so alpha and bias arrive as one [1, 128] VMEM row.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {"block_t": (64, 128)}

SINKHORN_ITERS = 20  # baseline.py SINKHORN_ITERS
NORM_EPS = 1e-6  # baseline.py NORM_EPS
LANES = 128
N_STREAMS = 4  # the lane layout below (16 res entries, 4 pre, 4 post) is written for hc_mult 4
PRE, POST, RES = 0, 4, 8  # first lane of each mapping in the projection's result (phi's column order)
SQ = 24  # lane carrying a row's sum of squares through the token sum
SLOT = 32  # lanes per stream's slot of the projection
# Mixing matmuls per grid step: bt / 2 tokens each (4 * 32 = 128 rows at the default block_t). A fixed count, so the
# kernel's body is the same program at every size (the verdict ties the priced program to the checked one); the
# loop is unrolled in Python: as a fori_loop it took libtpu's profiler past 300 s to compile at two grid steps.
GROUPS = 2


def _phi_slots(phi):
    """[n*32, C] bf16, phi transposed (on a TPU phi [n*C, 24] is stored minor-to-major {0, 1}, so phi.T moves
    nothing): rows 32j..32j+23 are stream j's slot, its 24 columns (pre, post, res)."""
    n = N_STREAMS
    chans = phi.shape[0] // n
    cols = phi.T.astype(jnp.bfloat16)  # [24, n*C]: pre, post, res
    slot = jnp.concatenate([cols, jnp.zeros((SLOT - cols.shape[0], n * chans), jnp.bfloat16)], axis=0)
    return slot.reshape(SLOT, n, chans).transpose(1, 0, 2).reshape(n * SLOT, chans)


def _gates(ab_ref, lane):
    """[1, 128] f32 each: every lane's gating factor and bias, in phi's column order (pre, post, res), from the
    [1, 128] row holding bias in lanes 0..23 and alpha in 24..26."""
    n = N_STREAMS
    ab = ab_ref[...]
    width = 2 * n + n * n
    gate = jnp.where(lane < POST, ab[:, width:width + 1],
                     jnp.where(lane < RES, ab[:, width + 1:width + 2], ab[:, width + 2:width + 3]))
    return gate, jnp.where(lane < width, ab, 0.0)


def _sinkhorn_lanes(z, lane):
    """Sinkhorn-Knopp on each row's lanes RES..RES+15 (a row-major [4, 4] block), returned replicated with period 16
    (lane c holds entry c % 16)."""
    z = pltpu.roll(z, LANES - RES, 1)  # the block to lanes 0..15
    valid = lane < 16
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


def _period4(v, first, lane):
    """Lanes first..first+3 of v copied across all 128 lanes: lane c holds v[first + c % 4] (first % 4 == 0)."""
    v = jnp.where((lane >= first) & (lane < first + 4), v, 0.0)
    for shift in (4, 8, 16, 32, 64):
        v = v + pltpu.roll(v, shift, 1)
    return v


def _mhc_kernel(x_ref, out_ref, phi_ref, ab_ref, li_ref, ns_ref, proj_ref, crow_ref, pre_ref, lhs_ref, *,
                group):
    # x_ref: [bt, n, C] streams; out_ref: [bt, C] the sublayer's output; phi_ref: [n*32, C] bf16 (_phi_slots);
    # ab_ref: [1, 128] f32, bias in lanes 0..23, alpha in 24..26; li_ref: [bt, C]; ns_ref: [bt, n, C].
    # Scratch: proj_ref [bt*n, 128] f32 the rows' projections; crow_ref [2, bt*n, 128] f32 each row's coefficients
    # ([0]: H_res[t, i, c % 4] at lane c of row 4t+i; [1]: 2 H_post[t, i]); pre_ref [bt, 128] f32 H_pre[t, c % 4];
    # lhs_ref [5*group, 256] bf16 a group's M_res over M_pre (lanes 0..127) and M_post (lanes 128..).
    bt, n, chans = x_ref.shape
    rows = bt * n
    chunks = chans // LANES

    def squares(c, acc):
        x = x_ref[:, :, pl.ds(pl.multiple_of(c * LANES, LANES), LANES)].reshape(rows, LANES).astype(jnp.float32)
        return acc + x * x

    # unroll 2 at every size (smoke's 256 channels are two chunks): a size-dependent unroll is another program
    acc = lax.fori_loop(0, chunks, squares, jnp.zeros((rows, LANES), jnp.float32), unroll=2)
    sq = jnp.sum(acc, axis=-1, keepdims=True)  # [rows, 1]

    proj = lax.dot_general(x_ref[...].reshape(rows, chans), phi_ref[...], (((1,), (1,)), ((), ())),
                           preferred_element_type=jnp.float32)  # [rows, n*32]
    r_i = lax.broadcasted_iota(jnp.int32, proj.shape, 0)
    l_i = lax.broadcasted_iota(jnp.int32, proj.shape, 1)
    proj = jnp.where(l_i == (r_i % n) * SLOT + SQ, sq, proj)  # the row's sum of squares in its slot
    proj_ref[...] = proj  # (a strided read wants a 128-lane ref)
    lane = lax.broadcasted_iota(jnp.int32, (bt, LANES), 1)
    m = jnp.zeros((bt, LANES), jnp.float32)
    for j in range(n):  # a token's four rows, each keeping its own stream's slot (lanes 32j..32j+31)
        m = m + jnp.where(lane // SLOT == j, proj_ref[pl.ds(j, bt, stride=n), :], 0.0)
    m = m + pltpu.roll(m, 2 * SLOT, 1)  # slots 0 + 2 and 1 + 3
    m = m + pltpu.roll(m, LANES - SLOT, 1)  # all four in lanes 0..23 (pre, post, res); the sum of squares in 24
    inv_rms = lax.rsqrt(m[:, SQ:SQ + 1] / (n * chans) + NORM_EPS)
    gate, shift = _gates(ab_ref, lax.broadcasted_iota(jnp.int32, (1, LANES), 1))
    z = gate * (m * inv_rms) + shift
    sig = jax.nn.sigmoid(z)
    res = _sinkhorn_lanes(z, lane)
    pre_ref[...] = _period4(sig, PRE, lane)
    for i in range(n):  # token t's coefficients onto its row 4t+i
        crow_ref[0, pl.ds(i, bt, stride=n), :] = _period4(res, n * i, lane)
        crow_ref[1, pl.ds(i, bt, stride=n), :] = jnp.broadcast_to(2.0 * sig[:, POST + i:POST + i + 1], (bt, LANES))

    g_rows = group * n
    ri = lax.broadcasted_iota(jnp.int32, (g_rows, LANES), 0)
    ci = lax.broadcasted_iota(jnp.int32, (g_rows, LANES), 1)
    ti = lax.broadcasted_iota(jnp.int32, (group, LANES), 0)
    ce = lax.broadcasted_iota(jnp.int32, (group, LANES), 1)

    for g in range(GROUPS):
        toks = pl.ds(g * group, group)
        grow = pl.ds(g * g_rows, g_rows)
        # The coefficients reach the MXU from VMEM: fed straight from the vector unit, libtpu's LLO check rejects
        # the packed bf16 operand when profiling.
        lhs_ref[:g_rows, :LANES] = jnp.where(ci // n == ri // n, crow_ref[0, grow, :], 0.0).astype(jnp.bfloat16)
        lhs_ref[g_rows:, :LANES] = jnp.where(ce // n == ti, pre_ref[toks, :], 0.0).astype(jnp.bfloat16)
        lhs_ref[:g_rows, LANES:] = jnp.where(ci == ri // n, crow_ref[1, grow, :], 0.0).astype(jnp.bfloat16)
        y = jnp.dot(lhs_ref[:, :g_rows], x_ref[toks, :, :].reshape(g_rows, chans), preferred_element_type=jnp.float32)
        post = jnp.dot(lhs_ref[:g_rows, LANES:LANES + group], out_ref[toks, :], preferred_element_type=jnp.float32)
        ns_ref[toks, :, :] = (y[:g_rows] + post).astype(ns_ref.dtype).reshape(group, n, chans)
        li_ref[toks, :] = y[g_rows:].astype(li_ref.dtype)


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
    if layer_out.shape != (tokens, chans) or phi.shape != (n * chans, 2 * n + n * n):
        raise ValueError(f"layer_out {layer_out.shape} / phi {phi.shape} do not match streams {streams.shape}")
    bt = min(block_t, tokens)
    if tokens % bt or bt % 16:
        raise ValueError(f"block_t={bt} must divide tokens={tokens} and be a multiple of 16")
    if (chans // LANES) % 2:
        raise ValueError(f"hidden_size={chans} must be a multiple of {2 * LANES}")
    group = bt // GROUPS
    size = jnp.dtype(streams.dtype).itemsize
    width = n * chans
    cost = pl.CostEstimate(
        flops=tokens * (2 * width + 2 * width * n * SLOT + 2 * n * chans * (n * group + group) + 2 * n * group * chans),
        transcendentals=tokens * LANES * 2,
        bytes_accessed=size * tokens * (2 * width + 2 * chans) + 2 * chans * n * SLOT,
    )
    blocks = 2 * size * bt * (2 * width + 2 * chans) + 2 * 2 * chans * n * SLOT
    scratch = 4 * (3 * bt * n + bt) * LANES + 2 * 5 * group * 2 * LANES
    temps = 4 * (5 * group + n * group) * chans + size * bt * width  # y, post, the block's rows
    li, ns = pl.pallas_call(
        functools.partial(_mhc_kernel, group=group),
        out_shape=(jax.ShapeDtypeStruct((tokens, chans), streams.dtype),
                   jax.ShapeDtypeStruct((tokens, n, chans), streams.dtype)),
        grid=(tokens // bt,),
        in_specs=[
            pl.BlockSpec((bt, n, chans), lambda t: (t, 0, 0)),
            pl.BlockSpec((bt, chans), lambda t: (t, 0)),
            pl.BlockSpec((n * SLOT, chans), lambda t: (0, 0)),
            pl.BlockSpec((1, LANES), lambda t: (0, 0)),
        ],
        out_specs=[
            pl.BlockSpec((bt, chans), lambda t: (t, 0)),
            pl.BlockSpec((bt, n, chans), lambda t: (t, 0, 0)),
        ],
        scratch_shapes=[pltpu.VMEM((bt * n, LANES), jnp.float32), pltpu.VMEM((2, bt * n, LANES), jnp.float32),
                        pltpu.VMEM((bt, LANES), jnp.float32), pltpu.VMEM((5 * group, 2 * LANES), jnp.bfloat16)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",),
                                             vmem_limit_bytes=int(min(max(blocks + scratch + temps + (8 << 20), 16 << 20),
                                                                      100 << 20))),
        cost_estimate=cost,
        interpret=False,
    )(streams, layer_out, _phi_slots(phi),
      jnp.pad(jnp.concatenate([bias, alpha]).astype(jnp.float32), (0, LANES - 3 - bias.shape[0]))[None])
    return li, ns
