"""Pallas TPU kernels for rw_moe_permute_unpermute: MoE dispatch and combine as row-gather pipelines.

The routing metadata is computed in XLA and is small (T*k int32 values): the stable expert order of the T*k token
copies (an argsort of the flat expert ids), the source token and expert of each sorted position, and the inverse
permutation (where copy (t, j) landed). The data movement, which is the whole cost (T*k rows of `hidden` values
gathered, transformed, written, gathered again and reduced), is two Pallas kernels:

- dispatch: one grid step per block of `rows_per_block` sorted positions. Each row of the block is its own
  BlockSpec operand whose index map reads the source token from the scalar-prefetched order, so the pipeline DMAs
  the next block's rows while this one is written; the expert's scale row is fetched the same way (consecutive
  steps of one row operand usually meet the same expert, and an unchanged block index is not fetched again). It
  writes the permuted rows and the expert outputs (row * scale in f32, rounded to the dtype as the expert's output).
- combine: grid (token blocks, k). Step (i, j) gathers, for each of the block's `tokens_per_block` tokens, the
  expert output of its j-th copy (index map through the inverse permutation) and adds it, times the copy's gate
  weight, to an f32 accumulator; the last slot writes the combined rows. The slot axis carries the accumulator.

Rows are read as [1, hidden] slabs of [rows, 1, hidden] views (free reshapes), so every DMA is one contiguous row.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# rows_per_block: sorted positions per dispatch step (each its own row operand); tokens_per_block: tokens per
# combine step. Both are multiples of 16 or 8, bf16's and f32's sublane tiles, so output blocks are whole tiles.
TUNABLES = {"rows_per_block": (16, 32, 64), "tokens_per_block": (8, 16, 32)}


def _dispatch_kernel(src_ref, eid_ref, *refs, rows):
    # refs: rows x-row refs [1, hidden], rows scale-row refs [1, hidden], then permuted / expert_out [rows, hidden]
    x_refs, s_refs = refs[:rows], refs[rows:2 * rows]
    perm_ref, out_ref = refs[2 * rows:]
    x = jnp.concatenate([r[...] for r in x_refs], axis=0)  # [rows, hidden]
    scale = jnp.concatenate([r[...] for r in s_refs], axis=0)
    perm_ref[...] = x
    out_ref[...] = (x.astype(jnp.float32) * scale.astype(jnp.float32)).astype(out_ref.dtype)


def _combine_kernel(inv_ref, w_ref, *refs, tokens):
    # w_ref: [tokens, 1] f32 (slot j's gate weights); refs: tokens expert-output rows [1, hidden], then the
    # combined block [tokens, hidden] and its f32 accumulator
    row_refs = refs[:tokens]
    o_ref, acc_ref = refs[tokens:]
    j = pl.program_id(1)
    rows = jnp.concatenate([r[...] for r in row_refs], axis=0).astype(jnp.float32)  # [tokens, hidden]
    term = rows * w_ref[...]

    @pl.when(j == 0)
    def _first():
        acc_ref[...] = term

    @pl.when(j > 0)
    def _rest():
        acc_ref[...] += term

    @pl.when(j == pl.num_programs(1) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _divisor(n, want):
    """The largest divisor of n that is at most want (so the grid covers n exactly)."""
    want = max(1, min(want, n))
    while n % want:
        want -= 1
    return want


@functools.partial(jax.jit, static_argnames=("rows_per_block", "tokens_per_block"))
def permute_unpermute(x, expert_ids, weights, expert_scale, *, rows_per_block: int, tokens_per_block: int):
    t, k = expert_ids.shape
    e, hidden = expert_scale.shape
    if x.shape != (t, hidden):
        raise ValueError(f"x {x.shape} does not match expert_ids {expert_ids.shape} and expert_scale "
                         f"{expert_scale.shape}")
    if rows_per_block <= 0 or tokens_per_block <= 0:
        raise ValueError(f"rows_per_block={rows_per_block} and tokens_per_block={tokens_per_block} must be positive")
    copies = t * k
    rows = _divisor(copies, rows_per_block)
    tok = _divisor(t, tokens_per_block)

    # routing metadata (T*k int32): sorted position -> flat copy index, and its inverse
    flat_ids = expert_ids.reshape(copies).astype(jnp.int32)
    order = jnp.argsort(flat_ids, stable=True).astype(jnp.int32)
    src = order // k
    sorted_ids = jnp.take(flat_ids, order)
    inv = jnp.zeros((copies,), jnp.int32).at[order].set(jnp.arange(copies, dtype=jnp.int32), unique_indices=True)

    x3 = x.reshape(t, 1, hidden)
    s3 = expert_scale.reshape(e, 1, hidden)

    def row_of(table_index, r):
        return lambda i, src_ref, eid_ref: (table_index(src_ref, eid_ref)[i * rows + r], 0, 0)

    x_specs = [pl.BlockSpec((None, 1, hidden), row_of(lambda s, _: s, r)) for r in range(rows)]
    s_specs = [pl.BlockSpec((None, 1, hidden), row_of(lambda _, d: d, r)) for r in range(rows)]
    out_spec = pl.BlockSpec((rows, hidden), lambda i, src_ref, eid_ref: (i, 0))
    size = jnp.dtype(x.dtype).itemsize
    permuted, expert_out = pl.pallas_call(
        functools.partial(_dispatch_kernel, rows=rows),
        out_shape=(jax.ShapeDtypeStruct((copies, hidden), x.dtype),) * 2,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(copies // rows,),
            in_specs=[*x_specs, *s_specs], out_specs=(out_spec, out_spec)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        cost_estimate=pl.CostEstimate(flops=copies * hidden, transcendentals=0,
                                      bytes_accessed=4 * size * copies * hidden),
        interpret=False,
    )(src, sorted_ids, *([x3] * rows), *([s3] * rows))

    eo3 = expert_out.reshape(copies, 1, hidden)
    w_slots = weights.astype(jnp.float32).T.reshape(k, t, 1)  # [k, T, 1]: slot j's weights as a column

    def copy_row(r):
        return lambda i, j, inv_ref: (inv_ref[(i * tok + r) * k + j], 0, 0)

    combined = pl.pallas_call(
        functools.partial(_combine_kernel, tokens=tok),
        out_shape=jax.ShapeDtypeStruct((t, hidden), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(t // tok, k),
            in_specs=[pl.BlockSpec((None, tok, 1), lambda i, j, inv_ref: (j, i, 0)),
                      *[pl.BlockSpec((None, 1, hidden), copy_row(r)) for r in range(tok)]],
            out_specs=pl.BlockSpec((tok, hidden), lambda i, j, inv_ref: (i, 0)),
            scratch_shapes=[pltpu.VMEM((tok, hidden), jnp.float32)]),
        # tokens are independent; the slot axis carries the accumulator
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(flops=2 * copies * hidden, transcendentals=0,
                                      bytes_accessed=size * (copies + t) * hidden),
        interpret=False,
    )(inv, w_slots, *([eo3] * tok))
    return combined, permuted


def workload(x, expert_ids, weights, expert_scale, *, rows_per_block: int = 32, tokens_per_block: int = 16):
    """(combined[T, hidden], permuted[T*k, hidden]): the token copies in stable expert order, each scaled by its
    expert's scale, scattered back and summed with the gate weights in f32."""
    return permute_unpermute(x, expert_ids, weights, expert_scale, rows_per_block=rows_per_block,
                             tokens_per_block=tokens_per_block)
