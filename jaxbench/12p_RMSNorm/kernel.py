"""Reference Pallas TPU kernel for 12p_RMSNorm: row blocks over batch*seq, each holding the whole emb_dim."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Memory-bound: a block only has to be big enough to hide the per-step cost. At emb_dim=8192 in bf16 a
# 128-row block is 2 MiB; in + out double-buffered plus the f32 temporaries stay under 16 MiB scoped VMEM
# (256 rows overflows it on v5e: E1001 CompileTimeScopedVmemOom).
TUNABLES = {"block_rows": (8, 16, 32, 64, 128)}

EPSILON = 1e-5  # the task's CONFIG["epsilon"]
SUBLANES = 8


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Rows of x per grid step; emb_dim is never split because the mean needs the whole row."""

    block_rows: int

    def __post_init__(self):
        if self.block_rows <= 0:
            raise ValueError(f"block_rows={self.block_rows} must be positive")

    @classmethod
    def fit(cls, rows: int, *, block_rows: int) -> "BlockSizes":
        """Clamped to the row count (batch*seq), then checked to tile it in whole sublane groups."""
        sizes = cls(min(block_rows, rows))
        if rows % sizes.block_rows:
            raise ValueError(f"block_rows={sizes.block_rows} does not divide batch*seq_len={rows}")
        if sizes.block_rows != rows and sizes.block_rows % SUBLANES:
            raise ValueError(f"block_rows={sizes.block_rows} must be a multiple of {SUBLANES} or all {rows} rows")
        return sizes


def _rms_norm_kernel(x_ref, scale_ref, o_ref):
    # x_ref / o_ref: [block_rows, emb_dim], scale_ref: [1, emb_dim]
    x = x_ref[...].astype(jnp.float32)
    ms = jnp.mean(x * x, axis=-1, keepdims=True)  # [block_rows, 1]
    # Round the normalised row to the input dtype before scaling, as the model does; the product of two
    # bf16 values is exact in f32, so scaling in f32 and rounding once equals a bf16 multiply.
    normed = (x * lax.rsqrt(ms + EPSILON)).astype(o_ref.dtype).astype(jnp.float32)
    o_ref[...] = (normed * scale_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_rows",))
def workload(
    x: jax.Array,  # [batch, seq_len, emb_dim]
    scale: jax.Array,  # [emb_dim]
    *,
    block_rows: int = 128,
) -> jax.Array:  # [batch, seq_len, emb_dim] in x's dtype
    """x * rsqrt(mean(x^2) + eps) * scale, one grid step per block_rows rows of the flattened batch*seq."""
    batch, seq_len, emb = x.shape
    if scale.shape != (emb,):
        raise ValueError(f"scale has shape {scale.shape}, expected (emb_dim={emb},)")
    rows = batch * seq_len
    bs = BlockSizes.fit(rows, block_rows=block_rows)
    size = jnp.dtype(x.dtype).itemsize
    cost = pl.CostEstimate(
        flops=5 * rows * emb,
        transcendentals=rows,  # one rsqrt per row
        bytes_accessed=2 * rows * emb * size + emb * jnp.dtype(scale.dtype).itemsize,
    )
    # Both reshapes are free (row-major bitcasts); scale gets a sublane dim so its block is 2-D.
    out = pl.pallas_call(
        _rms_norm_kernel,
        out_shape=jax.ShapeDtypeStruct((rows, emb), x.dtype),
        grid=(rows // bs.block_rows,),
        in_specs=[
            pl.BlockSpec((bs.block_rows, emb), lambda i: (i, 0)),
            pl.BlockSpec((1, emb), lambda i: (0, 0)),
        ],
        out_specs=pl.BlockSpec((bs.block_rows, emb), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        cost_estimate=cost,
        interpret=False,
    )(x.reshape(rows, emb), scale.reshape(1, emb))
    return out.reshape(batch, seq_len, emb)
