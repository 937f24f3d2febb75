"""Pallas TPU kernel for rw_rl_logprob_entropy: one online-softmax pass over vocabulary tiles gives each token's
log-probability of its sampled id and its softmax entropy, reading the bf16 logits from HBM exactly once."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# The op is HBM-bound (2.5 GB of bf16 logits, ~8 VPU ops per logit), so the design is about reading each logit once
# and keeping the VPU work per logit small. A grid step holds a [block_t, block_v] logit tile (1.1 MiB at the
# defaults, enough to hide the ~0.35 us per-step cost behind its DMA). Inside a step the tile is walked in strips
# of STRIP rows x `chunk` lanes, so every temporary and accumulator lives in vregs instead of being materialised
# as a whole-tile f32 array in VMEM: pass 1 takes the strip's max (elementwise across chunks, one cross-lane
# reduce at the end), pass 2 accumulates sum(e), sum(e * z) and the sampled id's logit elementwise across chunks,
# then reduces across lanes once. The running per-row max / sums carry across vocab tiles (online softmax).
# 4608 = 9 * 512 divides Qwen's 152064 (33 tiles), so the full size never takes the masked last-tile path.
TUNABLES = {
    "block_t": (16, 32, 64, 128),
    "block_v": (4608, 13824, 50688, 152064),
    "chunk": (256, 512, 768),
}

TEMPERATURE = 0.7  # the task's sampling temperature (baseline.py TEMPERATURE)
SUBLANES, LANES = 8, 128
STRIP = 16  # rows per inner strip: one packed bf16 vreg holds 16 rows
# Chunk iterations unrolled: enough to hide the loop's scalar overhead, few enough that a whole-vocabulary tile (297
# chunks) still compiles in seconds (fully unrolled it took over 90 s).
UNROLL = 8
# Finite stand-in for logits past the vocabulary in a partial last tile: exp() of it is 0, and 0 * it is 0
# (-inf would give 0 * -inf = NaN in sum(e * z)).
PAD_LOGIT = -1e30


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Token rows and vocab columns per grid step, rows per inner strip and lanes per inner chunk; build with `fit`."""

    block_t: int
    block_v: int
    strip: int
    chunk: int

    def __post_init__(self):
        for name, value in dataclasses.asdict(self).items():
            if value <= 0:
                raise ValueError(f"{name}={value} must be positive")
        if self.block_t % self.strip or self.block_v % self.chunk:
            raise ValueError(f"strip={self.strip} / chunk={self.chunk} must divide block_t={self.block_t} / "
                             f"block_v={self.block_v}")

    @classmethod
    def fit(cls, tokens: int, vocab: int, *, block_t: int, block_v: int, chunk: int) -> "BlockSizes":
        """Blocks clamped to the array dims. A block smaller than its dim keeps its setting (the grid is a cdiv and
        the partial last block is masked or discarded); a block that is the whole dim gets an inner strip / chunk
        that divides it."""
        if block_t % SUBLANES or block_v % LANES or chunk % LANES:
            raise ValueError(f"block_t={block_t} must be a multiple of {SUBLANES}, block_v={block_v} and "
                             f"chunk={chunk} of {LANES}")
        bt, bv = min(block_t, tokens), min(block_v, vocab)
        strip = next((s for s in (STRIP, SUBLANES) if bt % s == 0), bt)
        if bv == vocab:  # the whole vocabulary in one tile: the chunk must divide it
            chunk = next((c for c in range(min(chunk, bv) // LANES * LANES, 0, -LANES) if bv % c == 0), bv)
        elif bv % chunk:
            raise ValueError(f"chunk={chunk} does not divide block_v={bv}")
        return cls(bt, bv, strip, chunk)


def _vmem_limit(*block_bytes: int) -> int:
    """Scoped VMEM for blocks and scratch of `block_bytes` (double-buffered ones passed twice), a quarter more and
    4 MiB for Mosaic's own scratch (a 32 x 152064 tile asked 26.7 MiB for 19.5 of blocks); never below the 16 MiB
    default, never above 100 MiB (v5e and v6e have 128)."""
    return int(min(max(sum(block_bytes) * 5 // 4 + (4 << 20), 16 << 20), 100 << 20))


def _pick_sampled(ids_ref, x_ref, row0, i, j, *, strip: int):
    """[strip, 1] f32: each row's raw logit at its sampled id, 0 where the id lies in another vocab tile. One aligned
    128-lane slab load per row (ids are scalars in SMEM), instead of a compare and select on every logit."""
    bt, bv = x_ref.shape
    tokens = ids_ref.shape[0]
    rows = pl.ds(row0, strip)
    row_ids = lax.broadcasted_iota(jnp.int32, (strip, LANES), 0)
    lanes = lax.broadcasted_iota(jnp.int32, (strip, LANES), 1)
    hits = jnp.zeros((strip, LANES), jnp.float32)
    for k in range(strip):  # static: strip scalar reads and slab loads
        # Clamped: the rows of a partial last token block have no id (their outputs are never written).
        local = ids_ref[jnp.minimum(i * bt + row0 + k, tokens - 1)] - j * bv
        # The slab holding the id, clamped into the tile: an id outside it lands >= 128 or < 0 lanes from the base
        # (bv is a lane multiple), so it hits nothing.
        base = pl.multiple_of(lax.div(jnp.clip(local, 0, bv - 1), LANES) * LANES, LANES)
        slab = x_ref[rows, pl.ds(base, LANES)].astype(jnp.float32)
        hits = jnp.where((row_ids == k) & (lanes == local - base), slab, hits)
    return jnp.sum(hits, axis=-1, keepdims=True)


def _logprob_entropy_kernel(ids_ref, x_ref, lp_ref, ent_ref, m_ref, l_ref, s_ref, t_ref, *, vocab: int,
                            strip: int, chunk: int, masked_tail: bool):
    # ids_ref: [tokens] int32 in SMEM; x_ref: [bt, bv] logits; lp_ref / ent_ref: [bt, 1] f32 outputs
    # m_ref: running max of z = x / T; l_ref: sum exp(z - m); s_ref: sum exp(z - m) * z; t_ref: the raw logit at
    # the sampled id (all [bt, 1] f32, carried across the vocab axis)
    i, j, last = pl.program_id(0), pl.program_id(1), pl.num_programs(1) - 1
    bt, bv = x_ref.shape
    n_strips, n_chunks = bt // strip, bv // chunk
    unroll = min(n_chunks, UNROLL)
    inv_t = 1.0 / TEMPERATURE
    cols = lax.broadcasted_iota(jnp.int32, (strip, chunk), 1)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        s_ref[...] = jnp.zeros_like(s_ref)
        t_ref[...] = jnp.zeros_like(t_ref)

    def tile(mask: bool):
        def load(rows, c, dtype=jnp.float32):
            x = x_ref[rows, pl.ds(pl.multiple_of(c * chunk, chunk), chunk)].astype(dtype)
            if mask:  # columns past the vocabulary hold whatever the partial block's buffer had (even NaN)
                x = jnp.where(cols < vocab - j * bv - c * chunk, x, PAD_LOGIT)
            return x

        # Pass 1's max is exact in the logits' own dtype, and on chips with a bf16 VPU (v6e) it then takes half the
        # vector ops; the masked tail works in f32.
        max_dtype = jnp.float32 if mask else x_ref.dtype

        def one_strip(r, carry):
            row0 = pl.multiple_of(r * strip, strip)
            rows = pl.ds(row0, strip)
            # Pass 1: the strip's max over this tile, on the raw logits (1/T > 0 keeps the order).
            xmax = lax.fori_loop(0, n_chunks, lambda c, acc: jnp.maximum(acc, load(rows, c, max_dtype)),
                                 jnp.full((strip, chunk), -jnp.inf, max_dtype), unroll=unroll)
            m_prev = m_ref[rows, :]
            m_new = jnp.maximum(m_prev, jnp.max(xmax.astype(jnp.float32), axis=-1, keepdims=True) * inv_t)

            # Pass 2: exponentials against the new max, summed elementwise across chunks, across lanes once.
            def accumulate(c, acc):
                l, s = acc
                z = load(rows, c) * inv_t
                e = jnp.exp(z - m_new)
                return l + e, s + e * z

            zeros = jnp.zeros((strip, chunk), jnp.float32)
            l, s = lax.fori_loop(0, n_chunks, accumulate, (zeros, zeros), unroll=unroll)
            alpha = jnp.exp(m_prev - m_new)  # rescales what earlier vocab tiles summed
            l_ref[rows, :] = alpha * l_ref[rows, :] + jnp.sum(l, axis=-1, keepdims=True)
            s_ref[rows, :] = alpha * s_ref[rows, :] + jnp.sum(s, axis=-1, keepdims=True)
            t_ref[rows, :] += _pick_sampled(ids_ref, x_ref, row0, i, j, strip=strip)
            m_ref[rows, :] = m_new
            return carry

        lax.fori_loop(0, n_strips, one_strip, 0)

    if masked_tail:  # only a partial last tile pays for the mask
        pl.when(j < last)(lambda: tile(mask=False))
        pl.when(j == last)(lambda: tile(mask=True))
    else:
        tile(mask=False)

    @pl.when(j == last)
    def _store():
        l = l_ref[...]
        lse = m_ref[...] + jnp.log(l)
        lp_ref[...] = t_ref[...] * inv_t - lse
        ent_ref[...] = lse - s_ref[...] / l


@functools.partial(jax.jit, static_argnames=tuple(TUNABLES))
def workload(
    logits: jax.Array,  # [batch_tokens, vocab_size] bf16
    token_ids: jax.Array,  # [batch_tokens] int32
    *,
    block_t: int = 32,
    block_v: int = 152064,
    chunk: int = 512,
) -> tuple[jax.Array, jax.Array]:  # (logprob, entropy), each f32[batch_tokens]
    """z = logits / TEMPERATURE; returns (log_softmax(z)[token_id], -sum(softmax(z) * log_softmax(z))) per token."""
    tokens, vocab = logits.shape
    if token_ids.shape != (tokens,):
        raise ValueError(f"token_ids has shape {token_ids.shape}, expected (batch_tokens={tokens},)")
    bs = BlockSizes.fit(tokens, vocab, block_t=block_t, block_v=block_v, chunk=chunk)
    bt, bv = bs.block_t, bs.block_v
    grid = (pl.cdiv(tokens, bt), pl.cdiv(vocab, bv))
    size = jnp.dtype(logits.dtype).itemsize
    cost = pl.CostEstimate(flops=8 * tokens * vocab, transcendentals=tokens * vocab + tokens * grid[1],
                           bytes_accessed=size * tokens * vocab + 12 * tokens)
    kernel = functools.partial(_logprob_entropy_kernel, vocab=vocab, strip=bs.strip, chunk=bs.chunk,
                               masked_tail=vocab % bv != 0)
    row_spec = pl.BlockSpec((bt, 1), lambda i, j: (i, 0))
    lp, ent = pl.pallas_call(
        kernel,
        out_shape=[jax.ShapeDtypeStruct((tokens, 1), jnp.float32)] * 2,
        grid=grid,
        # All ids in SMEM at once (32 KiB at 8192 tokens): a rank-1 SMEM block must be the whole array or 1024-long.
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM),
                  pl.BlockSpec((bt, bv), lambda i, j: (i, j))],
        out_specs=[row_spec, row_spec],
        scratch_shapes=[pltpu.VMEM((bt, 1), jnp.float32)] * 4,
        compiler_params=pltpu.CompilerParams(
            # Token blocks are independent; the vocab axis carries the online-softmax state.
            dimension_semantics=("parallel", "arbitrary"),
            # double-buffered logit tile; [bt, 1] ids, outputs and scratch pad to 128 lanes.
            vmem_limit_bytes=_vmem_limit(2 * size * bt * bv, 10 * 4 * bt * LANES)),
        cost_estimate=cost,
        interpret=False,
    )(token_ids.astype(jnp.int32), logits)
    return lp.reshape(tokens), ent.reshape(tokens)
