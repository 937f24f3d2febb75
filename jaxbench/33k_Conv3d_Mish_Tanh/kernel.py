"""Pallas TPU kernel for 33k_Conv3d_Mish_Tanh: tanh(mish(conv3d(x) + conv_b)), NCDHW in and out, VALID 3x3x3.

Layout: nothing is transposed or padded outside the kernel. x is read as [1, C_in, 1, H, W] depth-slice blocks and the
output is written straight into its NCDHW [N, C_out, D_out, H_out, W_out] array.
Grid (image, output depth slice), the depth axis sequential. Each step fetches one new input depth slice
[C_in, H, W] (slice d + 2; slices 0 and 1 come from two more inputs whose block only changes with the image) and
widens it into a 3-slot f32 VMEM ring of 128-lane rows, so every input slice is read from HBM once.
For each chunk of 16 output rows and each of the three depth taps: a sublane-strided load per input row gathers its
C_in channels as a [C_in, 128] slab (pixels on lanes); the 18 rows sit side by side on lanes, the kw taps are lane
rolls of that strip and the kh taps lane-aligned slices. The 27 taps stack into an im2col block P[27 C_in, 16 x 128]
and the conv is one MXU dot W[C_out, 27 C_in] . P (bf16 in, f32 accumulation). The bias, Mish and tanh run on that
f32 block; the [C_out, rows x 128] result is turned into NCDHW row tiles through a small VMEM scratch (row-major
stores, then per-channel sublane-strided loads). Columns past W_out hold roll junk and are never stored; rows past
H_out are clipped on writeback.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# store_unroll: unroll factor of the per-channel store loop.
TUNABLES = {"store_unroll": (4, 8, 16)}

CHUNK = 16  # output rows per im2col dot: one packed bf16 sublane tile of the output
LANES = 128


def _mish_tanh(y):
    # tanh(softplus(y)) = n / (n + 2) with n = e^y (e^y + 2); for y > 20 it is 1 in f32.
    e = jnp.exp(jnp.minimum(y, 20.0))
    n = e * (e + 2.0)
    return jnp.tanh(y * (n / (n + 2.0)))


def _kernel(x0_ref, x1_ref, x2_ref, w_ref, cb_ref, o_ref, xs_ref, t_ref, *, cin, h, w, n_chunks, store_unroll):
    # x*_ref [1, cin, 1, h, w] (depth slices 0, 1 and d + 2); w_ref [cout, 27 cin] bf16; cb_ref [cout, 1] f32;
    # o_ref [1, cout, 1, n_chunks * CHUNK, wo]; xs_ref [3 * cin * h, 128] f32 (ring of 3 depth slices);
    # t_ref [CHUNK * cout, 128] f32 (row-major staging of one chunk).
    d = pl.program_id(1)
    cout = w_ref.shape[0]
    wo = o_ref.shape[-1]
    plane = cin * h

    def _put(slot, src_ref):
        base = slot * plane
        if plane % 8 == 0:
            base = pl.multiple_of(base, 8)
        xs_ref[pl.ds(base, plane), 0:w] = src_ref[0, :, 0].reshape(plane, w).astype(jnp.float32)

    @pl.when(d == 0)
    def _first():
        xs_ref[...] = jnp.zeros(xs_ref.shape, jnp.float32)
        _put(0, x0_ref)
        _put(1, x1_ref)

    _put((d + 2) % 3, x2_ref)

    wm = w_ref[...]
    cb = cb_ref[...]
    span = (CHUNK + 2) * LANES

    def _chunk(k, carry):
        r0 = k * CHUNK  # first output row of the chunk (rows past H_out are clipped on writeback)
        pieces = []
        for kd in range(3):
            base = ((d + kd) % 3) * plane
            strip = jnp.concatenate(
                [xs_ref[pl.ds(base + jnp.minimum(r0 + i, h - 1), cin, stride=h), :] for i in range(CHUNK + 2)],
                axis=1)
            shifted = jnp.concatenate(
                [strip, pltpu.roll(strip, span - 1, 1), pltpu.roll(strip, span - 2, 1)], axis=0
            ).astype(jnp.bfloat16)
            pieces += [shifted[:, kh * LANES:(kh + CHUNK) * LANES] for kh in range(3)]
        p = jnp.concatenate(pieces, axis=0)  # [27 cin, CHUNK * 128], rows (kd, kh, kw, cin)
        acc = jnp.dot(wm, p, preferred_element_type=jnp.float32)  # [cout, CHUNK * 128]
        y = _mish_tanh(acc + cb)
        for r in range(CHUNK):
            t_ref[r * cout:(r + 1) * cout, :] = y[:, r * LANES:(r + 1) * LANES]
        row = pl.multiple_of(k * CHUNK, CHUNK)

        def _store(o, c):
            v = t_ref[pl.ds(o, CHUNK, stride=cout), :]
            o_ref[0, o, 0, pl.ds(row, CHUNK), :] = v[:, :wo].astype(o_ref.dtype)
            return c

        lax.fori_loop(0, cout, _store, 0, unroll=store_unroll)
        return carry

    lax.fori_loop(0, n_chunks, _chunk, 0)


@functools.partial(jax.jit, static_argnames=("store_unroll",))
def workload(x, conv_w, conv_b, *, store_unroll: int = 8):
    """tanh(mish(conv3d(x, VALID, stride 1) + conv_b)) from the f32 accumulator, in x's dtype."""
    n, cin, dd, h, wd = x.shape
    cout = conv_w.shape[0]
    if conv_w.shape != (cout, cin, 3, 3, 3):
        raise ValueError(f"conv_w has shape {conv_w.shape}, expected ({cout}, {cin}, 3, 3, 3)")
    if wd > LANES:
        raise ValueError(f"width {wd} > {LANES}: this kernel keeps one image row in one lane tile")
    do, ho, wo = dd - 2, h - 2, wd - 2
    n_chunks = pl.cdiv(ho, CHUNK)
    rows_pad = n_chunks * CHUNK
    wm = jnp.transpose(conv_w, (0, 2, 3, 4, 1)).reshape(cout, 27 * cin).astype(jnp.bfloat16)
    cb = conv_b.astype(jnp.float32).reshape(cout, 1)
    isz = jnp.dtype(x.dtype).itemsize
    kernel = functools.partial(_kernel, cin=cin, h=h, w=wd, n_chunks=n_chunks, store_unroll=store_unroll)
    tiles = 3 * 2 * cin * h * LANES * isz + 3 * cin * h * LANES * 4 + 2 * cout * rows_pad * LANES * isz
    tiles += 4 * CHUNK * cout * LANES + 2 * wm.size * 2
    temps = 3 * (3 * cin * (CHUNK + 2) * LANES) * 6 + 27 * cin * CHUNK * LANES * 2 * 2 + 4 * cout * CHUNK * LANES * 4
    vmem = int(min(max((tiles + temps) * 3 // 2, 16 << 20), 64 << 20))
    cost = pl.CostEstimate(
        flops=2 * n * cout * do * ho * wo * 27 * cin + 10 * n * cout * do * ho * wo,
        transcendentals=2 * n * cout * do * ho * wo,
        bytes_accessed=x.size * isz + wm.size * 2 + n * cout * do * ho * wo * isz,
    )
    xspec = lambda f: pl.BlockSpec((1, cin, 1, h, wd), f)  # noqa: E731
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, cout, do, ho, wo), x.dtype),
        grid=(n, do),
        in_specs=[
            xspec(lambda i, j: (i, 0, 0, 0, 0)),
            xspec(lambda i, j: (i, 0, 1, 0, 0)),
            xspec(lambda i, j: (i, 0, j + 2, 0, 0)),
            pl.BlockSpec((cout, 27 * cin), lambda i, j: (0, 0)),
            pl.BlockSpec((cout, 1), lambda i, j: (0, 0)),
        ],
        out_specs=pl.BlockSpec((1, cout, 1, rows_pad, wo), lambda i, j: (i, 0, j, 0, 0)),
        scratch_shapes=[pltpu.VMEM((3 * cin * h, LANES), jnp.float32), pltpu.VMEM((CHUNK * cout, LANES), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=vmem),
        cost_estimate=cost,
        interpret=False,
    )(x, x, x, wm, cb)
