"""Pallas TPU kernel for 17p_Triangle_Multiplication: AlphaFold2's outgoing triangle multiplicative update.

Three pallas_calls:
1. projections: LayerNorm(z) and the four input projections per z row, the gated a and b written channels-first
   ([C, N, N]) so that each channel's contraction is a plain matrix product;
2. triangle: t[c] = a[c] @ b[c]^T per channel (bf16 operands, f32 accumulation on the MXU), b[c] held whole in VMEM;
3. output: LayerNorm(t) over channels, the output projection, and the output gate recomputed from LayerNorm(z).
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# row_block: z rows (i) per grid step of the projection and output kernels (a static loop over them, one
# [col_block, C] piece each); col_block: the k (or j) extent of those steps; tri_block: rows of a[c] per step of
# the triangle kernel (b[c] is whole in VMEM: N x N bf16, 4.5 MiB at N = 1536).
TUNABLES = {
    "row_block": (8, 16, 32),
    "col_block": (256, 512, 768, 1536),
    "tri_block": (128, 256, 512, 768),
}

EPS = 1e-5
SUBLANES, LANES = 8, 128
_NT = (((1,), (1,)), ((), ()))  # x[m, d] . y[n, d] -> [m, n]


def _fit(extent, block, align, name):
    block = min(block, extent)
    if extent % block or (block != extent and block % align):
        raise ValueError(f"{name}={block} must divide {extent} and be a multiple of {align} (or all of it)")
    return block


def _sigmoid(x):
    return 0.5 + 0.5 * jnp.tanh(0.5 * x)


def _layer_norm_rows(x, scale, bias):
    """LayerNorm over the last (lane) axis of an f32 [rows, C] value; scale / bias are f32 [1, C]."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    centred = x - mean
    var = jnp.mean(centred * centred, axis=-1, keepdims=True)
    return centred * lax.rsqrt(var + EPS) * scale + bias


def _proj_kernel(z_ref, ln_ref, w_ref, b_ref, a_out, b_out, *, rows, c):
    # z_ref: [rows, cols, C]; ln_ref: [2, C] f32 (scale, bias); w_ref: [4C, C] (w_in transposed);
    # b_ref: [4C, 1] f32; a_out / b_out: [C, rows, cols] channels-first.
    scale, bias = ln_ref[0:1, :], ln_ref[1:2, :]
    w = w_ref[...]
    bb = b_ref[...]
    for r in range(rows):
        zn = _layer_norm_rows(z_ref[r].astype(jnp.float32), scale, bias).astype(z_ref.dtype)
        proj = lax.dot_general(w, zn, _NT, preferred_element_type=jnp.float32) + bb  # [4C, cols]
        a = _sigmoid(proj[c:2 * c]) * proj[0:c]
        b = _sigmoid(proj[3 * c:4 * c]) * proj[2 * c:3 * c]
        a_out[:, r, :] = a.astype(a_out.dtype)
        b_out[:, r, :] = b.astype(b_out.dtype)


def _tri_kernel(a_ref, b_ref, t_ref):
    # a_ref: [tri_block, N] rows i of a[c]; b_ref: [N, N] all of b[c]; t_ref: [tri_block, N]
    t_ref[...] = lax.dot_general(a_ref[...], b_ref[...], _NT,
                                 preferred_element_type=jnp.float32).astype(t_ref.dtype)


def _out_kernel(t_ref, z_ref, ln_ref, wo_ref, wg_ref, bias_ref, o_ref, *, rows):
    # t_ref: [C, rows, cols] channels-first; z_ref / o_ref: [rows, cols, C]; ln_ref: [4, C] f32 (in scale, in bias,
    # out scale, out bias); wo_ref / wg_ref: [C, C]; bias_ref: [2, C] f32 (b_out, b_gate).
    in_s, in_b, out_s, out_b = (ln_ref[i:i + 1, :] for i in range(4))
    bo, bg = bias_ref[0:1, :], bias_ref[1:2, :]
    wo, wg = wo_ref[...], wg_ref[...]
    dtype = o_ref.dtype
    for r in range(rows):
        t = t_ref[:, r, :].astype(jnp.float32).T  # [cols, C]
        tn = _layer_norm_rows(t, out_s, out_b).astype(dtype)
        update = jnp.dot(tn, wo, preferred_element_type=jnp.float32) + bo
        zn = _layer_norm_rows(z_ref[r].astype(jnp.float32), in_s, in_b).astype(dtype)
        gate = _sigmoid(jnp.dot(zn, wg, preferred_element_type=jnp.float32) + bg)
        o_ref[r] = (gate * update).astype(dtype)


def _vmem_limit(need: int) -> int:
    return int(min(max(need * 3 // 2, 32 << 20), 100 << 20))


@functools.partial(jax.jit, static_argnames=("row_block", "col_block", "tri_block"))
def workload(z, norm_in_scale, norm_in_bias, w_in, b_in, norm_out_scale, norm_out_bias, w_out, b_out, w_gate,
             b_gate, *, row_block: int = 16, col_block: int = 512, tri_block: int = 256):
    """sigmoid(LN(z) Wg + bg) * (LN(t) Wo + bo), t[i, j] = sum_k a[i, k] * b[j, k] per channel."""
    n, n2, c = z.shape
    if n != n2 or w_in.shape != (c, 4 * c):
        raise ValueError(f"z must be [N, N, C] and w_in [C, 4C]: got {z.shape}, {w_in.shape}")
    dtype = z.dtype
    isz = jnp.dtype(dtype).itemsize
    rows = _fit(n, row_block, 2 * SUBLANES, "row_block")
    cols = _fit(n, col_block, LANES, "col_block")
    tri = _fit(n, tri_block, 2 * SUBLANES, "tri_block")
    f32 = jnp.float32

    # Tiny parameter reshapes (a few KiB) in XLA.
    ln_in = jnp.stack([norm_in_scale, norm_in_bias]).astype(f32)
    w_in_t = w_in.T  # [4C, C]
    b_in_col = b_in.astype(f32).reshape(4 * c, 1)

    # 1. projections and gates, channels-first outputs.
    grid = (n // rows, n // cols)
    block_bytes = rows * cols * c * isz
    a_t, b_t = pl.pallas_call(
        functools.partial(_proj_kernel, rows=rows, c=c),
        out_shape=(jax.ShapeDtypeStruct((c, n, n), dtype), jax.ShapeDtypeStruct((c, n, n), dtype)),
        grid=grid,
        in_specs=[
            pl.BlockSpec((rows, cols, c), lambda i, k: (i, k, 0)),
            pl.BlockSpec((2, c), lambda i, k: (0, 0)),
            pl.BlockSpec((4 * c, c), lambda i, k: (0, 0)),
            pl.BlockSpec((4 * c, 1), lambda i, k: (0, 0)),
        ],
        out_specs=(pl.BlockSpec((c, rows, cols), lambda i, k: (0, i, k)),
                   pl.BlockSpec((c, rows, cols), lambda i, k: (0, i, k))),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel"),
            vmem_limit_bytes=_vmem_limit(6 * block_bytes + 4 * 4 * c * cols * 4)),
        cost_estimate=pl.CostEstimate(flops=2 * n * n * c * 4 * c, transcendentals=2 * n * n * c,
                                      bytes_accessed=3 * n * n * c * isz),
    )(z, ln_in, w_in_t, b_in_col)

    # 2. the triangle contraction, one channel's GEMM per grid row; b[c] stays resident across the i blocks.
    t_t = pl.pallas_call(
        _tri_kernel,
        out_shape=jax.ShapeDtypeStruct((c, n, n), dtype),
        grid=(c, n // tri),
        in_specs=[
            pl.BlockSpec((None, tri, n), lambda ch, i: (ch, i, 0)),
            pl.BlockSpec((None, n, n), lambda ch, i: (ch, 0, 0)),
        ],
        out_specs=pl.BlockSpec((None, tri, n), lambda ch, i: (ch, i, 0)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary"),
            vmem_limit_bytes=_vmem_limit(2 * isz * (2 * tri * n + n * n) + 4 * tri * n)),
        cost_estimate=pl.CostEstimate(flops=2 * n * n * n * c, transcendentals=0,
                                      bytes_accessed=3 * n * n * c * isz),
    )(a_t, b_t)

    # 3. LayerNorm(t), output projection and gate, back to [N, N, C].
    ln_all = jnp.stack([norm_in_scale, norm_in_bias, norm_out_scale, norm_out_bias]).astype(f32)
    biases = jnp.stack([b_out, b_gate]).astype(f32)
    return pl.pallas_call(
        functools.partial(_out_kernel, rows=rows),
        out_shape=jax.ShapeDtypeStruct((n, n, c), dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((c, rows, cols), lambda i, j: (0, i, j)),
            pl.BlockSpec((rows, cols, c), lambda i, j: (i, j, 0)),
            pl.BlockSpec((4, c), lambda i, j: (0, 0)),
            pl.BlockSpec((c, c), lambda i, j: (0, 0)),
            pl.BlockSpec((c, c), lambda i, j: (0, 0)),
            pl.BlockSpec((2, c), lambda i, j: (0, 0)),
        ],
        out_specs=pl.BlockSpec((rows, cols, c), lambda i, j: (i, j, 0)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel"),
            vmem_limit_bytes=_vmem_limit(6 * block_bytes + 4 * 4 * c * cols * 4)),
        cost_estimate=pl.CostEstimate(flops=2 * n * n * c * 2 * c, transcendentals=n * n * c,
                                      bytes_accessed=3 * n * n * c * isz),
    )(t_t, z, ln_all, w_out, w_gate, biases)
