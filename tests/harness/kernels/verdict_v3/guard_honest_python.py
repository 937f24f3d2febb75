"""Honest (verdict v3): ordinary Python a kernel may use runs under the armed guard: a frozen dataclass that
validates itself (with a forward reference to its own class), a namedtuple, typing's NamedTuple and TypeVar, an
enum, and functools helpers."""

import collections
import dataclasses
import enum
import functools
import typing

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

T = typing.TypeVar("T")
Tile = collections.namedtuple("Tile", ["rows", "cols"])


class Shape(typing.NamedTuple):
    rows: int
    cols: int


class Mode(enum.Enum):
    ROWS = 1
    BLOCK = 2


Kind = enum.Enum("Kind", "plain fused")


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    rows: int = 64
    cols: typing.Optional[int] = None

    def __post_init__(self):
        if self.rows <= 0:
            raise ValueError(f"rows must be positive, got {self.rows}")

    @classmethod
    def fit(cls, n: int, *, rows: int) -> "BlockSizes":
        return cls(rows=min(rows, n))


@functools.lru_cache(maxsize=None)
def _rows(n: int, rows: int) -> int:
    return BlockSizes.fit(n, rows=rows).rows


def _kernel(x_ref, s_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = (x * jax.lax.rsqrt(ms + 1e-5)).astype(o_ref.dtype) * s_ref[...]


def workload(x, scale, *, rows=64):
    b, s, d = x.shape
    tile = Tile(_rows(b * s, rows), d)
    assert Shape(*tile) == Shape(tile.rows, d) and Mode.ROWS is not Kind.plain
    flat = x.reshape(b * s, d)
    out = pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(flat.shape, x.dtype), grid=(b * s // tile.rows,),
                         in_specs=[pl.BlockSpec((tile.rows, d), lambda i: (i, 0)),
                                   pl.BlockSpec((1, d), lambda i: (0, 0))],
                         out_specs=pl.BlockSpec((tile.rows, d), lambda i: (i, 0)))(flat, scale.reshape(1, d))
    return out.reshape(b, s, d)
