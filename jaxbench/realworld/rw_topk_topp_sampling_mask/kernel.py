"""Pallas TPU kernel for rw_topk_topp_sampling_mask: top-k then top-p filtering without a sort.

XLA's program sorts every row of the [batch, vocab] logits. This kernel never sorts: it finds each row's two
thresholds by bisection over the logits' order-preserving int32 keys, one pass over the row (in VMEM) per step.

- The k-th largest logit is the largest key t with count(key >= t) >= k (32 steps between the row's min and max).
- The nucleus ends at the smallest key t whose strictly-greater probability mass, over the top-k softmax, is under
  top_p: that mass only changes at the row's values, so the search lands on a value, and the tokens kept are those
  at or above it (32 steps between the k-th value and the max). The top-k softmax numerators exp(x - max) are
  written once to a VMEM scratch and summed by every step.
- The output is the kept numerators divided by their sum.

One grid step per block of rows ("parallel"); each row block is read from HBM once and the output written once, so
the kernel's cost is its 64 passes over VMEM. The keys are made once, into a VMEM scratch beside the numerators';
passes go through the row in chunks of up to 8 lane tiles, unrolled. By `maxkernel estimate` on v5e the kernel is
overhead-bound, 29.4 ms with the keys remade on every pass and no unroll, 8.35 ms as written: 26x its HBM floor,
the price of 64 passes over a 128256-wide row; fewer passes (several thresholds a pass) is the next step.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {"block_b": (8, 16, 32), "unroll": (1, 2, 4, 8)}

SUBLANES, LANES = 8, 128
STEPS = 32  # bisection steps: an int32 key range halves to one key in 32


def _key(x):
    """Order-preserving int32 key of f32 values: the bits, with the low 31 flipped for negative values."""
    bits = lax.bitcast_convert_type(x, jnp.int32)
    return bits ^ (lax.shift_right_arithmetic(bits, 31) & 0x7FFFFFFF)


def _midpoint(lo, hi):
    """floor((lo + hi) / 2) without int32 overflow."""
    return lax.shift_right_arithmetic(lo, 1) + lax.shift_right_arithmetic(hi, 1) + (lo & hi & 1)


def _sampling_kernel(x_ref, k_ref, p_ref, o_ref, key_ref, e_ref, *, chunk, n_chunks, unroll):
    # x_ref / o_ref / e_ref: [block_b, vocab] f32, key_ref: [block_b, vocab] int32 (the logits' keys, made once);
    # k_ref: [block_b, 1] int32; p_ref: [block_b, 1] f32
    rows = x_ref.shape[0]

    def cols(c):
        return pl.ds(pl.multiple_of(c * chunk, LANES), chunk)

    def over_row(body, init):
        """fold body(chunk index, acc) over the row's chunks, then sum the lanes: [block_b, 1]."""
        acc = lax.fori_loop(0, n_chunks, body, init, unroll=unroll)
        return jnp.sum(acc, axis=1, keepdims=True)

    def keys_and_max(c, carry):
        lo, hi, top = carry
        x = x_ref[:, cols(c)]
        key = _key(x)
        key_ref[:, cols(c)] = key
        return jnp.minimum(lo, key), jnp.maximum(hi, key), jnp.maximum(top, x)

    lo_k, hi_k, top = lax.fori_loop(0, n_chunks, keys_and_max,
                                    (jnp.full((rows, chunk), jnp.iinfo(jnp.int32).max, jnp.int32),
                                     jnp.full((rows, chunk), jnp.iinfo(jnp.int32).min, jnp.int32),
                                     jnp.full((rows, chunk), -jnp.inf, jnp.float32)), unroll=unroll)
    key_min = jnp.min(lo_k, axis=1, keepdims=True)
    key_max = jnp.max(hi_k, axis=1, keepdims=True)
    x_max = jnp.max(top, axis=1, keepdims=True)
    k = k_ref[...]

    # The k-th largest: count(key >= lo) >= k holds at the row's min, fails one past its max.
    def count_at_least(t):
        return over_row(lambda c, acc: acc + (key_ref[:, cols(c)] >= t).astype(jnp.int32),
                        jnp.zeros((rows, chunk), jnp.int32))

    def kth_step(_, carry):
        lo, hi = carry
        mid = _midpoint(lo, hi)
        enough = count_at_least(mid) >= k
        return jnp.where(enough, mid, lo), jnp.where(enough, hi, mid)

    kth, _ = lax.fori_loop(0, STEPS, kth_step, (key_min, key_max + 1))

    # The top-k softmax numerators, kept for every step of the nucleus search, and their sum.
    def numerators(c, acc):
        e = jnp.where(key_ref[:, cols(c)] >= kth, jnp.exp(x_ref[:, cols(c)] - x_max), 0.0)
        e_ref[:, cols(c)] = e
        return acc + e

    target = p_ref[...] * over_row(numerators, jnp.zeros((rows, chunk), jnp.float32))

    # The nucleus's last value: the smallest key whose strictly-greater mass is under top_p. Below the k-th value
    # the mass is all of it (not under p < 1); at the max it is none.
    def mass_above(t):
        return over_row(lambda c, acc: acc + jnp.where(key_ref[:, cols(c)] > t, e_ref[:, cols(c)], 0.0),
                        jnp.zeros((rows, chunk), jnp.float32))

    def nucleus_step(_, carry):
        lo, hi = carry
        mid = _midpoint(lo, hi)
        under = mass_above(mid) < target
        return jnp.where(under, lo, mid), jnp.where(under, mid, hi)

    _, last = lax.fori_loop(0, STEPS, nucleus_step, (kth - 1, key_max))

    def kept(c, acc):
        w = jnp.where(key_ref[:, cols(c)] >= last, e_ref[:, cols(c)], 0.0)
        o_ref[:, cols(c)] = w
        return acc + w

    inv = 1.0 / over_row(kept, jnp.zeros((rows, chunk), jnp.float32))

    def normalise(c, _):
        o_ref[:, cols(c)] = o_ref[:, cols(c)] * inv
        return 0

    lax.fori_loop(0, n_chunks, normalise, 0, unroll=unroll)


def _chunk_lanes(vocab: int) -> int:
    """The widest chunk of at most 8 lane tiles that divides the row."""
    tiles = vocab // LANES
    return LANES * max(g for g in range(1, 9) if tiles % g == 0)


@functools.partial(jax.jit, static_argnames=("block_b", "unroll"))
def workload(logits, top_k, top_p, *, block_b: int = 8, unroll: int = 4):
    """Top-k then top-p filtered softmax of each row, f32[batch, vocab] (0 at the filtered tokens)."""
    batch, vocab = logits.shape
    if vocab % LANES:
        raise ValueError(f"vocab_size={vocab} must be a multiple of {LANES}")
    bb = min(block_b, batch)
    if batch % bb or (bb != batch and bb % SUBLANES):
        raise ValueError(f"block_b={bb} must divide batch={batch} and be a multiple of {SUBLANES} (or all of it)")
    chunk = _chunk_lanes(vocab)
    row = pl.BlockSpec((bb, vocab), lambda i: (i, 0))
    col = pl.BlockSpec((bb, 1), lambda i: (i, 0))
    # Double-buffered logits and output blocks plus the keys' and numerators' scratch, with room for Mosaic's own.
    vmem = min(max(6 * bb * vocab * 4 * 5 // 4, 16 << 20), 100 << 20)
    n = batch * vocab
    cost = pl.CostEstimate(flops=(2 * STEPS * 3 + 12) * n, transcendentals=n, bytes_accessed=8 * n + 8 * batch)
    return pl.pallas_call(
        functools.partial(_sampling_kernel, chunk=chunk, n_chunks=vocab // chunk, unroll=unroll),
        out_shape=jax.ShapeDtypeStruct((batch, vocab), jnp.float32),
        grid=(batch // bb,),
        in_specs=[row, col, col],
        out_specs=row,
        scratch_shapes=[pltpu.VMEM((bb, vocab), jnp.int32), pltpu.VMEM((bb, vocab), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",), vmem_limit_bytes=vmem),
        cost_estimate=cost,
        interpret=False,
    )(logits.astype(jnp.float32), top_k.astype(jnp.int32).reshape(batch, 1),
      top_p.astype(jnp.float32).reshape(batch, 1))
