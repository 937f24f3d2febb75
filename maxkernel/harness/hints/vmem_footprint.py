"""Where a kernel's VMEM goes: each pipelined block (times its buffer count) and each scratch buffer of every
pallas_call in a traced program, named as the kernel function names them, so an out-of-VMEM hint can say which
block to shrink."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Buffer", "buffers", "describe", "walk_eqns"]

_LANES = 128


@dataclass(frozen=True)
class Buffer:
    name: str  # the kernel's parameter name (x_ref), else the operand's origin (args[0])
    kind: str  # "input", "output" or "scratch"
    shape: tuple[int, ...]
    dtype: str
    copies: int  # 2 for a double-buffered pipelined block, 1 for Buffered(1) and scratch
    nbytes: int  # one copy, padded to the (sublane, 128) tile

    @property
    def total(self) -> int:
        return self.copies * self.nbytes


def _padded_bytes(shape: tuple[int, ...], itemsize: int) -> int:
    """A VMEM buffer's size: the last dim padded to 128 lanes, the second-to-last to a whole sublane tile
    (8 rows of 32 bits: 16 for bf16, 32 for 8-bit types)."""
    dims = list(shape) or [1]
    dims[-1] = -(-dims[-1] // _LANES) * _LANES
    if len(dims) >= 2:
        rows = 8 * max(1, 4 // max(itemsize, 1))
        dims[-2] = -(-dims[-2] // rows) * rows
    return math.prod(dims) * itemsize


def walk_eqns(jaxpr):
    """Every equation of `jaxpr` and of the jaxprs nested in its equations' params (loops, conds, pallas bodies)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for p in eqn.params.values():
            for sub in (p if isinstance(p, (list, tuple)) else [p]):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from walk_eqns(inner)


def _in_vmem(aval) -> bool:
    space = str(getattr(aval, "memory_space", "")).lower()
    return not any(s in space for s in ("any", "hbm", "smem", "semaphore", "sem"))


def buffers(closed_jaxpr) -> list[Buffer]:
    """Every VMEM buffer of the program's pallas_calls, largest total first."""
    found = []
    for eqn in walk_eqns(closed_jaxpr.jaxpr):
        if eqn.primitive.name != "pallas_call":
            continue
        gm = eqn.params["grid_mapping"]
        info = getattr(eqn.params["jaxpr"], "debug_info", None)
        names = list(getattr(info, "arg_names", None) or ())[gm.num_index_operands:]
        for i, bm in enumerate(gm.block_mappings):
            aval = bm.transformed_block_aval
            if not _in_vmem(aval):
                continue
            mode = bm.pipeline_mode
            copies = int(getattr(mode, "buffer_count", 2) or 2) if mode is not None else 2
            shape = tuple(int(d) for d in aval.shape)
            found.append(Buffer(names[i] if i < len(names) else str(bm.origin),
                                "input" if i < gm.num_inputs else "output", shape, str(aval.dtype), copies,
                                _padded_bytes(shape, aval.dtype.itemsize)))
        base = gm.num_inputs + gm.num_outputs
        for j, aval in enumerate(gm.scratch_avals):
            inner = getattr(aval, "inner_aval", aval)
            if not _in_vmem(aval) or not hasattr(inner, "dtype") or not hasattr(inner.dtype, "itemsize"):
                continue
            shape = tuple(int(d) for d in inner.shape)
            name = names[base + j] if base + j < len(names) else f"scratch[{j}]"
            found.append(Buffer(name, "scratch", shape, str(inner.dtype), 1,
                                _padded_bytes(shape, inner.dtype.itemsize)))
    return sorted(found, key=lambda b: -b.total)


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def describe(found: list[Buffer], needed: int | None = None, limit: int = 3) -> str:
    """One clause: the largest buffers with their footprint, what share of the compiler's figure they are, and
    which block to shrink first. '' when there are none."""
    if not found:
        return ""
    parts = []
    for b in found[:limit]:
        dims = "x".join(map(str, b.shape)) or "scalar"
        times = f"{b.copies} x {_mib(b.nbytes)}" if b.copies > 1 else _mib(b.nbytes)
        parts.append(f"{b.kind} {b.name} [{dims}] {b.dtype}: {times}")
    total = sum(b.total for b in found)
    rest = ""
    if needed and needed > total:
        rest = f"; the other {_mib(needed - total)} is the kernel body's temporaries (f32 copies of blocks)"
    first = found[0]
    what = "its block" if first.kind != "scratch" else "that scratch buffer"
    return (f"buffers {_mib(total)} — {'; '.join(parts)}{rest}. Shrink {first.name} ({what}, the largest) first")
