"""Hostile: the honest idioms kernel, but its interpret flag is set positionally, which no static rule sees: the
kernel asks for an interpreter of its choosing (no Mosaic kernel for the TPU, unchecked by the strict one)."""

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax
from jax._src import dtypes
from jax.experimental import pallas as pl


@dataclasses.dataclass(frozen=True)
class Blocks:
    rows: int
    block_rows: int
    steps: int = 0

    def __post_init__(self):
        if self.rows % self.block_rows:
            raise ValueError(f"block_rows={self.block_rows} does not divide rows={self.rows}")
        object.__setattr__(self, "steps", self.rows // self.block_rows)


def _body(x_ref, s_ref, o_ref):
    v = x_ref[...].astype(jnp.float32)
    normed = (v * lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + 1e-5)).astype(o_ref.dtype)
    o_ref[...] = (normed.astype(jnp.float32) * s_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def rms_norm(x, scale, block_rows=32, interpret=False):
    rows, emb = x.shape
    b = Blocks(rows, min(block_rows, rows))
    out_dtype = dtypes.canonicalize_dtype(x.dtype)
    return pl.pallas_call(
        _body, out_shape=jax.ShapeDtypeStruct((rows, emb), out_dtype), grid=(b.steps,),
        in_specs=[pl.BlockSpec((b.block_rows, emb), lambda i: (i, 0)), pl.BlockSpec((1, emb), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((b.block_rows, emb), lambda i: (i, 0)), interpret=interpret,
    )(x, scale.reshape(1, emb))


def workload(x, scale):
    batch, seq, emb = x.shape
    with jax.default_matmul_precision("highest"):
        out = rms_norm(x.reshape(batch * seq, emb), scale, 32, True)
    return out.reshape(batch, seq, emb)
