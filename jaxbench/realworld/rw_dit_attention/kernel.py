"""Pallas TPU kernel for rw_dit_attention: non-causal flash attention with each head's whole K and V resident in
VMEM, one grid step per (batch, head, query block) and an in-kernel online-softmax loop over key chunks."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Why K/V stay resident: at Wan-14B's 75600 tokens a head's K and V are 19.4 MB each in bf16. The usual grid over
# (query block, key block) would re-stream them once per query block (148 times at block_q=512: 115 GB of HBM
# traffic, and ~900k grid steps of fixed cost); holding them in VMEM for all of a head's query blocks reads them
# once (their block index only changes with the head), and the key loop runs inside the kernel. They are
# single-buffered (pl.Buffered(1)): the next head's K/V are then fetched un-overlapped, ~50 us on v5e per head
# against ~15 ms of MXU work, and VMEM stays at ~40 MiB instead of ~80.
# seq_len (75600, 32760) is no multiple of 128: the resident block covers the first seq_len // block_k * block_k
# keys (a block need not divide its dim), and the remaining keys come as a separate [block_k, head_dim] tail
# block, zero-padded in plain JAX (a few KB per head) and masked in the kernel; only that tail chunk pays for the
# mask. Query rows use a cdiv grid: a partial last query block computes garbage rows that are never written.
TUNABLES = {
    "block_q": (256, 512, 1024, 2048),
    "block_k": (256, 512, 1024),
}

SUBLANES, LANES = 8, 128
# Finite, so a masked logit's exp is 0 without any (-inf) - (-inf) = NaN.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # q[bq, d] . k[bk, d] -> [bq, bk]


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Query rows per grid step and key rows per in-kernel chunk; build with `fit`."""

    block_q: int
    block_k: int

    def __post_init__(self):
        for name, value in dataclasses.asdict(self).items():
            if value <= 0:
                raise ValueError(f"{name}={value} must be positive")

    @classmethod
    def fit(cls, seq_len: int, *, block_q: int, block_k: int) -> "BlockSizes":
        """block_q clamped to seq_len (a partial last query block is fine); block_k clamped to the largest lane
        multiple not above seq_len (the chunk is the lane dim of the logit tile, and keys past the last whole chunk
        go to the padded tail)."""
        if block_q % SUBLANES or block_k % LANES:
            raise ValueError(f"block_q={block_q} must be a multiple of {SUBLANES}, block_k={block_k} of {LANES}")
        return cls(min(block_q, seq_len), max(LANES, min(block_k, seq_len // LANES * LANES)))


def _vmem_limit(*block_bytes: int) -> int:
    """Scoped VMEM for blocks and scratch of `block_bytes`, a quarter more for Mosaic's own scratch; never below
    the 16 MiB default, never above 100 MiB (v5e and v6e have 128)."""
    return int(min(max(sum(block_bytes) * 5 // 4, 16 << 20), 100 << 20))


def _attention_kernel(*refs, sm_scale: float, n_main: int, tail_len: int):
    # q_ref / o_ref: [bq, d]; k_ref / v_ref (when n_main > 0): [n_main * bk, d], the head's resident keys;
    # kt_ref / vt_ref (when tail_len > 0): [bk, d], the last keys zero-padded; m_ref / l_ref: [bq, 1] f32 running
    # row max and row sum; acc_ref: [bq, d] f32
    q_ref, *kv_refs = refs[:-4]
    o_ref, m_ref, l_ref, acc_ref = refs[-4:]
    main_refs = kv_refs[:2] if n_main else ()
    tail_refs = kv_refs[-2:] if tail_len else ()
    m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
    l_ref[...] = jnp.zeros_like(l_ref)
    acc_ref[...] = jnp.zeros_like(acc_ref)
    q = q_ref[...]

    def update(k, v, valid=None):
        s = lax.dot_general(q, k, _CONTRACT_LAST, preferred_element_type=jnp.float32) * sm_scale
        if valid is not None:  # the padded tail: keys past seq_len must get no weight
            cols = lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(cols < valid, s, MASK_VALUE)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)  # rescales what earlier key chunks accumulated
        p = jnp.exp(s - m_new)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
        # The probabilities enter the second matmul in v's dtype, as the baseline feeds them.
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    if main_refs:
        k_ref, v_ref = main_refs
        bk = k_ref.shape[0] // n_main

        @pl.loop(0, n_main)
        def _chunk(c):
            rows = pl.ds(pl.multiple_of(c * bk, bk), bk)
            update(k_ref[rows, :], v_ref[rows, :])

    if tail_refs:
        kt_ref, vt_ref = tail_refs
        update(kt_ref[...], vt_ref[...], valid=tail_len)

    o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=tuple(TUNABLES))
def workload(
    q: jax.Array,  # [batch, num_heads, seq_len, head_dim]
    k: jax.Array,  # [batch, num_heads, seq_len, head_dim]
    v: jax.Array,  # [batch, num_heads, seq_len, head_dim]
    *,
    block_q: int = 512,
    block_k: int = 512,
) -> jax.Array:  # [batch, num_heads, seq_len, head_dim] in q's dtype
    """softmax(q k^T / sqrt(head_dim)) v over all keys (no mask), f32 softmax, probabilities in v's dtype."""
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k, v shapes differ: {q.shape}, {k.shape}, {v.shape} (all [batch, heads, seq, head_dim])")
    batch, heads, seq_len, head_dim = q.shape
    bs = BlockSizes.fit(seq_len, block_q=block_q, block_k=block_k)
    bq, bk = bs.block_q, bs.block_k
    n_main, tail_len = seq_len // bk, seq_len % bk
    grid = (batch, heads, pl.cdiv(seq_len, bq))

    def per_head(block_rows, **kw):
        return pl.BlockSpec((None, None, block_rows, head_dim), lambda b, h, i: (b, h, 0, 0), **kw)

    q_spec = pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i: (b, h, i, 0))
    operands, in_specs = [q], [q_spec]
    if n_main:
        # The index only moves with the head, so one buffer suffices (see the module comment).
        operands += [k, v]
        in_specs += [per_head(n_main * bk, pipeline_mode=pl.Buffered(1))] * 2
    if tail_len:
        pad = ((0, 0), (0, 0), (0, bk - tail_len), (0, 0))
        operands += [jnp.pad(x[:, :, n_main * bk:], pad) for x in (k, v)]
        in_specs += [per_head(bk)] * 2

    size = jnp.dtype(q.dtype).itemsize
    pairs = batch * heads * seq_len * seq_len
    cost = pl.CostEstimate(flops=4 * pairs * head_dim, transcendentals=pairs,
                           bytes_accessed=size * 4 * q.size)  # q, k, v read once, o written once
    kernel = functools.partial(_attention_kernel, sm_scale=1.0 / math.sqrt(head_dim), n_main=n_main,
                               tail_len=tail_len)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=grid,
        in_specs=in_specs,
        out_specs=q_spec,
        scratch_shapes=[
            pltpu.VMEM((bq, 1), jnp.float32),
            pltpu.VMEM((bq, 1), jnp.float32),
            pltpu.VMEM((bq, head_dim), jnp.float32),
        ],
        # Every (batch, head, query block) is independent: the key loop is inside the kernel.
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel"),
            # resident K and V (one buffer each), double-buffered q / o / tail blocks, the f32 logit tile and its
            # exponentials, the accumulator and the [bq, 1] rows padded to 128 lanes.
            vmem_limit_bytes=_vmem_limit(2 * size * n_main * bk * head_dim, 2 * 2 * size * bq * head_dim,
                                         2 * 2 * size * bk * head_dim, 3 * 4 * bq * bk, 3 * 4 * bq * LANES)),
        cost_estimate=cost,
        interpret=False,
    )(*operands)
