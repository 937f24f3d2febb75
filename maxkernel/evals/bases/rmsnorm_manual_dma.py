"""12p_RMSNorm with a hand-written DMA: x stays in HBM and each grid step copies its row block into VMEM
itself. A correct base for the DMA-pairing mistakes in maxkernel/evals/mistakes.py (a copy started and never
waited on, a wait on a copy never started)."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPSILON = 1e-5  # the task's CONFIG["epsilon"]


def _rms_norm_kernel(x_hbm, scale_ref, o_ref, x_vmem, sem):
    # x_hbm: [rows, emb] in HBM; x_vmem: [block_rows, emb] scratch; o_ref: [block_rows, emb]
    block_rows = x_vmem.shape[0]
    start = pl.multiple_of(pl.program_id(0) * block_rows, block_rows)
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(start, block_rows)], x_vmem, sem)
    copy.start()
    copy.wait()
    x = x_vmem[...].astype(jnp.float32)
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    normed = (x * lax.rsqrt(ms + EPSILON)).astype(o_ref.dtype).astype(jnp.float32)
    o_ref[...] = (normed * scale_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_rows",))
def workload(
    x: jax.Array,  # [batch, seq_len, emb_dim]
    scale: jax.Array,  # [emb_dim]
    *,
    block_rows: int = 64,
) -> jax.Array:
    """x * rsqrt(mean(x^2) + eps) * scale, the row block fetched by the kernel's own DMA."""
    batch, seq_len, emb = x.shape
    rows = batch * seq_len
    block_rows = min(block_rows, rows)
    if rows % block_rows:
        raise ValueError(f"block_rows={block_rows} does not divide batch*seq_len={rows}")
    out = pl.pallas_call(
        _rms_norm_kernel,
        out_shape=jax.ShapeDtypeStruct((rows, emb), x.dtype),
        grid=(rows // block_rows,),
        in_specs=[
            pl.BlockSpec(memory_space=pl.ANY),
            pl.BlockSpec((1, emb), lambda i: (0, 0)),
        ],
        out_specs=pl.BlockSpec((block_rows, emb), lambda i: (i, 0)),
        scratch_shapes=[pltpu.VMEM((block_rows, emb), x.dtype), pltpu.SemaphoreType.DMA(())],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(x.reshape(rows, emb), scale.reshape(1, emb))
    return out.reshape(batch, seq_len, emb)
