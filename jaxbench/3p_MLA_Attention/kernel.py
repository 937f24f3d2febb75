"""Pallas TPU kernel for 3p_MLA_Attention: DeepSeek-V3 multi-head latent attention, every matmul in Pallas.

Five pallas_calls: the two down-projections from x with their epilogues fused (RMSNorm of the q latent; RMSNorm of
the kv latent and RoPE of the shared rope key), the two up-projections (plain GEMMs), causal flash attention over
pairs of heads with the query's RoPE applied once per query block, and the output projection.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {
    "block_m": (256, 512, 1024),  # token rows per GEMM tile
    "block_n": (512, 1024, 2048),  # output columns per tile of the up- and output projections
    "block_k": (512, 1024, 2048),  # contraction per step of the output projection and the down-projections
    "block_q": (256, 512),
    "block_kv": (256, 512),
}

SUBLANES, LANES = 8, 128
RMS_EPS = 1e-6
ROPE_THETA = 10000
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # a[m, d] . b[n, d] -> [m, n]


def _block(extent: int, block: int, align: int, name: str) -> int:
    """The largest block not above `block` that divides `extent` and is a multiple of `align` (or all of it)."""
    if block >= extent:
        return extent
    for size in range(block - block % align, 0, -align):
        if extent % size == 0:
            return size
    raise ValueError(f"{name}={block}: no multiple of {align} up to it divides {extent}")


def _vmem_limit(*tile_bytes: int) -> int:
    """Scoped VMEM for double-buffered tiles plus scratch, a quarter more for Mosaic; 16 to 100 MiB."""
    return int(min(max(sum(tile_bytes) * 5 // 4, 16 << 20), 100 << 20))


def _rms(v_f32, scale_ref):
    """The baseline's RMSNorm of a row block already rounded to the activation dtype, in f32."""
    normed = v_f32 * lax.rsqrt(jnp.mean(v_f32 * v_f32, axis=-1, keepdims=True) + RMS_EPS)
    return normed * scale_ref[...].astype(jnp.float32)


def _rotate_half(x):
    """concat(-x[:, d/2:], x[:, :d/2]) as an exact matmul with a signed permutation (no lane shuffles)."""
    d = x.shape[-1]
    rows = lax.broadcasted_iota(jnp.int32, (d, d), 0)
    cols = lax.broadcasted_iota(jnp.int32, (d, d), 1)
    half = d // 2
    perm = jnp.where(rows == cols + half, -1.0, jnp.where(rows + half == cols, 1.0, 0.0)).astype(x.dtype)
    return jnp.dot(x, perm, preferred_element_type=jnp.float32)


def _rope(x, cos, sin):
    """RoPE of x [rows, d] (f32 holding activation-dtype values), in f32 like the baseline. The permutation matmul
    takes f32 operands: exact for such values, and libtpu's profiler rejects a bf16 one this narrow (an LLO type
    check on a 64-lane masked matmul) where Mosaic compiles it."""
    return x * cos + _rotate_half(x) * sin


# ---- GEMMs -------------------------------------------------------------------------------------------------------

def _gemm_kernel(*refs, epilogue, n_extra):
    a_ref, b_ref = refs[:2]
    extra = refs[2:2 + n_extra]
    outs = refs[2 + n_extra:-1]
    acc_ref = refs[-1]
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        epilogue(acc_ref, extra, outs)


def _plain(acc_ref, extra, outs):
    outs[0][...] = acc_ref[...].astype(outs[0].dtype)


def _gemm(a, b, *, block_m, block_n, block_k, epilogue=_plain, extra=(), extra_specs=(), out_splits=None,
          row_period=None):
    """a [M, K] @ b [K, N] with f32 accumulation and `epilogue` on the finished tile.

    out_splits: output column widths (the epilogue writes one output per split; each split needs the whole row,
    so block_n is N). extra: inputs the epilogue reads, with specs taking (i, j) -> block index.
    """
    (m, kdim), (_, n) = a.shape, b.shape
    bm = _block(m, block_m, SUBLANES, "block_m")
    if row_period is not None:  # a row table (RoPE) indexed by position: its period must be a multiple of bm
        bm = _block(row_period, bm, SUBLANES, "block_m")
    bk = _block(kdim, block_k, LANES, "block_k")
    bn = n if out_splits else _block(n, block_n, LANES, "block_n")
    splits = out_splits or (n,)
    grid = (m // bm, n // bn, kdim // bk)
    isz = jnp.dtype(a.dtype).itemsize
    out_shape = [jax.ShapeDtypeStruct((m, w), a.dtype) for w in splits]
    out_specs = [pl.BlockSpec((bm, w if out_splits else bn), lambda i, j, kk: (i, j)) for w in splits]
    cost = pl.CostEstimate(flops=2 * m * n * kdim, transcendentals=m if out_splits else 0,
                           bytes_accessed=isz * (m * kdim * grid[1] + kdim * n * grid[0] + m * n))
    kernel = functools.partial(_gemm_kernel, epilogue=epilogue, n_extra=len(extra))
    return pl.pallas_call(
        kernel,
        out_shape=out_shape,
        grid=grid,
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
                  *[pl.BlockSpec(s.block_shape, lambda i, j, kk, f=s.index_map: f(i, j)) for s in extra_specs]],
        out_specs=out_specs,
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=_vmem_limit(2 * isz * (bm * bk + bk * bn), 2 * isz * bm * bn, 4 * bm * bn,
                                         8 * bm * LANES * 2)),
        cost_estimate=cost,
        interpret=False,
    )(a, b, *extra)


def _q_latent_epilogue(acc_ref, extra, outs):
    (scale_ref,) = extra
    # The baseline rounds the projection to the activation dtype first. The rounding goes through the output block
    # (stored, then read back): libtpu's profiler rejects a pack unpacked straight back to f32 (an LLO type check)
    # where Mosaic compiles it.
    outs[0][...] = acc_ref[...].astype(outs[0].dtype)
    outs[0][...] = _rms(outs[0][...].astype(jnp.float32), scale_ref).astype(outs[0].dtype)


def _kv_latent_epilogue(acc_ref, extra, outs, *, kv_lora):
    scale_ref, cos_ref, sin_ref = extra
    c_kv_ref, k_pe_ref = outs
    dt = c_kv_ref.dtype
    c_kv_ref[...] = acc_ref[:, :kv_lora].astype(dt)  # rounded through the output block, as in the q latent's
    c_kv_ref[...] = _rms(c_kv_ref[...].astype(jnp.float32), scale_ref).astype(dt)
    k_pe_ref[...] = acc_ref[:, kv_lora:].astype(dt)
    k_pe_ref[...] = _rope(k_pe_ref[...].astype(jnp.float32), cos_ref[...], sin_ref[...]).astype(dt)


class _Spec:
    def __init__(self, block_shape, index_map):
        self.block_shape, self.index_map = block_shape, index_map


# ---- attention ---------------------------------------------------------------------------------------------------

def _attention_kernel(q_ref, kv_ref, kpe_ref, cos_ref, sin_ref, o_ref, qn_ref, qp_ref, m_ref, l_ref, acc_ref, *,
                      nope, rope, vdim, sm_scale, block_q, block_k):
    # q_ref: [bq, 2 * (nope + rope)] a pair of heads; kv_ref: [bk, 2 * (nope + vdim)] as [k0 | v0 | k1 | v1];
    # kpe_ref: [bk, rope] the shared, already rotated rope key; o_ref: [bq, 2 * vdim].
    qi, kj = pl.program_id(2), pl.program_id(3)
    qk = nope + rope

    @pl.when(kj == 0)
    def _init():
        for t in range(2):
            qn_ref[t] = q_ref[:, t * qk:t * qk + nope]
            q_pe = q_ref[:, t * qk + nope:(t + 1) * qk]
            qp_ref[t] = _rope(q_pe.astype(jnp.float32), cos_ref[...], sin_ref[...]).astype(qp_ref.dtype)
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    q_first, k_first = qi * block_q, kj * block_k
    q_last, k_last = q_first + block_q - 1, k_first + block_k - 1

    def step(masked: bool):
        kpe = kpe_ref[...]
        for t in range(2):
            base = t * (nope + vdim)
            k = kv_ref[:, base:base + nope]
            v = kv_ref[:, base + nope:base + nope + vdim]
            s = (lax.dot_general(qn_ref[t], k, _CONTRACT_LAST, preferred_element_type=jnp.float32)
                 + lax.dot_general(qp_ref[t], kpe, _CONTRACT_LAST, preferred_element_type=jnp.float32)) * sm_scale
            if masked:
                rows = q_first + lax.broadcasted_iota(jnp.int32, s.shape, 0)
                cols = k_first + lax.broadcasted_iota(jnp.int32, s.shape, 1)
                s = jnp.where(cols <= rows, s, MASK_VALUE)
            m_prev = m_ref[t]
            m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
            alpha = jnp.exp(m_prev - m_new)
            p = jnp.exp(s - m_new)
            l_ref[t] = alpha * l_ref[t] + jnp.sum(p, axis=-1, keepdims=True)
            acc_ref[t] = alpha * acc_ref[t] + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
            m_ref[t] = m_new

    # Blocks wholly above the diagonal are skipped (and not fetched, see the index map).
    pl.when(k_last <= q_first)(lambda: step(masked=False))
    pl.when((k_first <= q_last) & (k_last > q_first))(lambda: step(masked=True))

    @pl.when(kj == pl.num_programs(3) - 1)
    def _store():
        for t in range(2):
            o_ref[:, t * vdim:(t + 1) * vdim] = (acc_ref[t] / l_ref[t]).astype(o_ref.dtype)


def _attention(q, kv, k_pe, cos, sin, *, heads, nope, rope, vdim, block_q, block_kv):
    """Causal attention. q [b, s, heads * (nope + rope)], kv [b, s, heads * (nope + vdim)], k_pe [b, s, rope]."""
    batch, seq, _ = q.shape
    bq = _block(seq, block_q, SUBLANES, "block_q")
    bk = _block(seq, block_kv, LANES, "block_kv")
    grid = (batch, heads // 2, seq // bq, seq // bk)

    def kv_index(b, h, i, j):
        return (b, jnp.minimum(j, lax.div((i + 1) * bq - 1, bk)), h)

    def kpe_index(b, h, i, j):
        return (b, jnp.minimum(j, lax.div((i + 1) * bq - 1, bk)), 0)

    isz = jnp.dtype(q.dtype).itemsize
    pairs = batch * heads * seq * (seq + 1) // 2
    cost = pl.CostEstimate(flops=2 * pairs * (nope + rope + vdim), transcendentals=pairs,
                           bytes_accessed=isz * (q.size + kv.size * (seq // bq) // 2 + batch * seq * heads * vdim))
    kernel = functools.partial(_attention_kernel, nope=nope, rope=rope, vdim=vdim,
                               sm_scale=1.0 / math.sqrt(nope + rope), block_q=bq, block_k=bk)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((batch, seq, heads * vdim), q.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((None, bq, 2 * (nope + rope)), lambda b, h, i, j: (b, i, h)),
            pl.BlockSpec((None, bk, 2 * (nope + vdim)), kv_index),
            pl.BlockSpec((None, bk, rope), kpe_index),
            pl.BlockSpec((bq, rope), lambda b, h, i, j: (i, 0)),
            pl.BlockSpec((bq, rope), lambda b, h, i, j: (i, 0)),
        ],
        out_specs=pl.BlockSpec((None, bq, 2 * vdim), lambda b, h, i, j: (b, i, h)),
        scratch_shapes=[
            pltpu.VMEM((2, bq, nope), q.dtype),
            pltpu.VMEM((2, bq, rope), q.dtype),
            pltpu.VMEM((2, bq, 1), jnp.float32),
            pltpu.VMEM((2, bq, 1), jnp.float32),
            pltpu.VMEM((2, bq, vdim), jnp.float32),
        ],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
        cost_estimate=cost,
        interpret=False,
    )(q, kv, k_pe, cos, sin)


def _rope_tables(seq: int, dim: int):
    """cos and sin [seq, dim] of the baseline's rotate-half RoPE (positions 0..seq-1), in f32."""
    inv_freq = ROPE_THETA ** (-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
    ang = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    return jnp.concatenate([jnp.cos(ang)] * 2, axis=-1), jnp.concatenate([jnp.sin(ang)] * 2, axis=-1)


@functools.partial(jax.jit, static_argnames=tuple(TUNABLES))
def workload(x, w_dq, q_norm, w_uq, w_dkv, kv_norm, w_ukv, w_o, *, block_m: int = 512, block_n: int = 2048,
             block_k: int = 1024, block_q: int = 512, block_kv: int = 512):
    """MLA forward (the baseline's math): q = up(norm(down(x))), k and v up from the normed kv latent, causal."""
    batch, seq, emb = x.shape
    q_lora, heads, qk = w_uq.shape
    kv_lora = kv_norm.shape[0]
    rope = w_dkv.shape[1] - kv_lora
    nope = qk - rope
    vdim = w_o.shape[1]
    if heads % 2:
        raise ValueError(f"num_heads={heads} must be even: attention runs on pairs of heads")
    tokens = batch * seq
    xt = x.reshape(tokens, emb)
    cos, sin = _rope_tables(seq, rope)
    gemm = functools.partial(_gemm, block_m=block_m, block_n=block_n, block_k=block_k)

    (c_q,) = gemm(xt, w_dq, epilogue=_q_latent_epilogue, out_splits=(q_lora,), extra=(q_norm.reshape(1, q_lora),),
                  extra_specs=(_Spec((1, q_lora), lambda i, j: (0, 0)),))
    nb = seq // _block(seq, min(block_m, tokens), SUBLANES, "block_m")
    bm_rows = seq // nb
    c_kv, k_pe = gemm(xt, w_dkv, epilogue=functools.partial(_kv_latent_epilogue, kv_lora=kv_lora),
                      out_splits=(kv_lora, rope), row_period=seq,
                      extra=(kv_norm.reshape(1, kv_lora), cos, sin),
                      extra_specs=(_Spec((1, kv_lora), lambda i, j: (0, 0)),
                                   _Spec((bm_rows, rope), lambda i, j: (i % nb, 0)),
                                   _Spec((bm_rows, rope), lambda i, j: (i % nb, 0))))
    (q,) = gemm(c_q, w_uq.reshape(q_lora, heads * qk), block_k=q_lora)
    (kv,) = gemm(c_kv, w_ukv.reshape(kv_lora, heads * (nope + vdim)), block_k=kv_lora)
    o = _attention(q.reshape(batch, seq, heads * qk), kv.reshape(batch, seq, heads * (nope + vdim)),
                   k_pe.reshape(batch, seq, rope), cos, sin, heads=heads, nope=nope, rope=rope, vdim=vdim,
                   block_q=block_q, block_kv=block_kv)
    (out,) = gemm(o.reshape(tokens, heads * vdim), w_o.reshape(heads * vdim, emb))
    return out.reshape(batch, seq, emb)
