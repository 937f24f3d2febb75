"""Reference Pallas TPU kernel for 1p_Flash_Attention: causal flash attention, online softmax over kv blocks."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Per grid step a [block_q, block_k] f32 logit tile plus its exponentials live in VMEM (2 MiB at 512 x 512);
# q, k, v, o tiles are [block, head_dim] and small.
TUNABLES = {
    "block_q": (128, 256, 512, 1024),
    "block_k": (128, 256, 512, 1024),
}

SUBLANES, LANES = 8, 128
# Finite, so a row with every key of a block masked gives exp(0) terms that the next rescale zeroes,
# never the NaN of (-inf) - (-inf).
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # q[bq, d] . k[bk, d] -> [bq, bk]


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Query rows and key rows per grid step; build with `fit`."""

    block_q: int
    block_k: int

    def __post_init__(self):
        for name, value in dataclasses.asdict(self).items():
            if value <= 0:
                raise ValueError(f"{name}={value} must be positive")

    @classmethod
    def fit(cls, seq_len: int, *, block_q: int, block_k: int) -> "BlockSizes":
        """Blocks clamped to seq_len, then checked: block_k is the lane dim of the logit tile."""
        sizes = cls(min(block_q, seq_len), min(block_k, seq_len))
        for name, block, align in (("block_q", sizes.block_q, SUBLANES), ("block_k", sizes.block_k, LANES)):
            if seq_len % block:
                raise ValueError(f"{name}={block} does not divide seq_len={seq_len}")
            if block != seq_len and block % align:
                raise ValueError(f"{name}={block} must be a multiple of {align} or all of seq_len={seq_len}")
        return sizes


def _flash_kernel(q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, sm_scale, block_q, block_k, causal):
    # q_ref / o_ref: [block_q, head_dim], k_ref / v_ref: [block_k, head_dim]
    # m_ref / l_ref: [block_q, 1] f32 running row max and row sum, acc_ref: [block_q, head_dim] f32
    qi, kj = pl.program_id(2), pl.program_id(3)

    @pl.when(kj == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    q_first, k_first = qi * block_q, kj * block_k
    q_last, k_last = q_first + block_q - 1, k_first + block_k - 1

    def step(masked: bool):
        s = lax.dot_general(q_ref[...], k_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32) * sm_scale
        if masked:
            rows = q_first + lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = k_first + lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(cols <= rows, s, MASK_VALUE)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)  # rescales what earlier kv blocks accumulated
        p = jnp.exp(s - m_new)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(v_ref.dtype), v_ref[...],
                                                      preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    if causal:
        # Blocks wholly above the diagonal are skipped (their k/v DMA too, see the index map); only
        # blocks the diagonal crosses pay for the mask.
        pl.when(k_last <= q_first)(lambda: step(masked=False))
        pl.when((k_first <= q_last) & (k_last > q_first))(lambda: step(masked=True))
    else:
        step(masked=False)

    @pl.when(kj == pl.num_programs(3) - 1)
    def _store():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("causal", "block_q", "block_k"))
def flash_attention(
    q: jax.Array,  # [batch, num_heads, seq_len, head_dim]
    k: jax.Array,  # [batch, num_heads, seq_len, head_dim]
    v: jax.Array,  # [batch, num_heads, seq_len, head_dim]
    *,
    causal: bool,
    block_q: int,
    block_k: int,
) -> jax.Array:  # [batch, num_heads, seq_len, head_dim] in q's dtype
    """softmax(q k^T / sqrt(head_dim) [, causal mask]) v, one (batch, head, q block) grid row per output tile."""
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k, v shapes differ: {q.shape}, {k.shape}, {v.shape} (all [batch, heads, seq, head_dim])")
    batch, heads, seq_len, head_dim = q.shape
    bs = BlockSizes.fit(seq_len, block_q=block_q, block_k=block_k)
    bq, bk = bs.block_q, bs.block_k
    grid = (batch, heads, seq_len // bq, seq_len // bk)

    def kv_index(b, h, i, j):
        if causal:
            # Past the last kv block this q block needs, keep pointing at that block: an unchanged block
            # index means no new DMA for the skipped steps. lax.div, not `//`: the indices are non-negative,
            # and floor_divide's sign fix-up lowers through a chip query that fails off-TPU.
            j = jnp.minimum(j, lax.div((i + 1) * bq - 1, bk))
        return (b, h, j, 0)

    size = jnp.dtype(q.dtype).itemsize
    pairs = batch * heads * seq_len * seq_len // (2 if causal else 1)
    kv_reads = batch * heads * (seq_len // bq) * seq_len * head_dim // (2 if causal else 1)
    cost = pl.CostEstimate(
        flops=4 * pairs * head_dim,
        transcendentals=pairs,
        bytes_accessed=size * (2 * q.size + 2 * kv_reads),  # q and o once; k and v once per q block
    )
    kernel = functools.partial(_flash_kernel, sm_scale=1.0 / math.sqrt(head_dim), block_q=bq, block_k=bk,
                               causal=causal)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i, j: (b, h, i, 0)),
            pl.BlockSpec((None, None, bk, head_dim), kv_index),
            pl.BlockSpec((None, None, bk, head_dim), kv_index),
        ],
        out_specs=pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i, j: (b, h, i, 0)),
        scratch_shapes=[
            pltpu.VMEM((bq, 1), jnp.float32),
            pltpu.VMEM((bq, 1), jnp.float32),
            pltpu.VMEM((bq, head_dim), jnp.float32),
        ],
        # The kv axis carries the online-softmax state; batch, heads and q blocks are independent.
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
        cost_estimate=cost,
        interpret=False,
    )(q, k, v)


def workload(q, k, v, *, block_q: int = 512, block_k: int = 512):
    """The task's causal self-attention; only the block sizes are tunable."""
    return flash_attention(q, k, v, causal=True, block_q=block_q, block_k=block_k)
