"""Where a child's idea comes from: a curated library of Pallas/TPU techniques (data), a person's additions,
and the profiler's reading of the parent kernel."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Strategy", "LIBRARY", "FIRST_VERSION", "PROFILER", "StrategySampler", "by_name"]


@dataclass(frozen=True)
class Strategy:
    name: str
    family: str  # the technique class, used by the evolve archive to keep kernels diverse
    text: str
    tags: tuple[str, ...] = ()  # operator words it applies to; empty means any kernel

    def applies_to(self, operator: str) -> bool:
        op = operator.lower()
        return not self.tags or any(t in op for t in self.tags)


_MM = ("gemm", "matmul", "bmm", "dot", "mlp", "moe", "grouped", "attention", "conv", "retention", "ssd", "triangle")
_ROWS = ("norm", "softmax", "logsumexp", "cross_entropy", "attention")

FIRST_VERSION = Strategy(
    "first-version", "baseline",
    "Write a straightforward, correct first kernel: one pallas_call over a simple grid, blocks that are full "
    "dims or multiples of (8, 128), float32 accumulation, and the block sizes as tunables.")
PROFILER = Strategy("profiler-advice", "profile", "Apply the profiler's advice on the parent kernel (below).")

LIBRARY: tuple[Strategy, ...] = (
    Strategy("bigger-blocks", "tiling",
             "Raise the block sizes so each grid step moves more data: fewer steps, less per-step overhead, "
             "as long as double-buffered blocks stay well inside scoped VMEM."),
    Strategy("mxu-tiles", "tiling",
             "Make matmul tiles multiples of the MXU size (128 on v5e, 256 on v6e/7x) in every dim, with the "
             "reduction dim innermost in the grid and marked 'arbitrary'.", _MM),
    Strategy("f32-scratch-accumulator", "memory",
             "Accumulate across the reduction grid axis in a float32 VMEM scratch buffer: zero it at the first "
             "step (pl.when(k == 0)) and write the output once at the last step.", _MM),
    Strategy("fuse-epilogue", "fusion",
             "Fuse the element-wise epilogue (bias, activation, scaling, residual) into the kernel's last "
             "reduction step instead of a second pass over HBM."),
    Strategy("single-pass-rows", "fusion",
             "Compute row statistics and the normalised output in one pass over each row block (online "
             "max/sum for softmax-like ops), so each input element is read from HBM once.", _ROWS),
    Strategy("lane-dense-output", "layout",
             "Keep the output block's last dim a multiple of 128 (lane dense) so stores are unmasked; reshape "
             "or transpose outside the hot loop if needed."),
    Strategy("bf16-mxu-inputs", "precision",
             "Feed the MXU bfloat16 operands and request float32 results (preferred_element_type), casting "
             "once at the end; never upcast whole input blocks to float32 before a dot.", _MM),
    Strategy("parallel-semantics", "parallelism",
             "Mark every grid axis that carries no dependency as 'parallel' in dimension_semantics so the "
             "compiler can split it across TensorCores (megacore, v7x)."),
    Strategy("grid-order", "tiling",
             "Reorder the grid so the operand reused across consecutive steps keeps the same block index and "
             "is not re-fetched (Pallas skips the copy when the index does not change)."),
    Strategy("deeper-pipeline", "memory",
             "Hide HBM latency behind compute by prefetching the next block yourself (the automatic pipeline "
             "double-buffers already; pl.Buffered(n) deeper than 2 is not something to rely on in the TPU "
             "lowering): keep the streamed operand in HBM (memory_space=pl.ANY), allocate 2-3 VMEM slots and "
             "a DMA semaphore per slot in scratch_shapes, start the copy of block i+1 "
             "(pltpu.make_async_copy(src, slot, sem).start()) before computing on block i and wait on it at "
             "the next step; or use pltpu.emit_pipeline for an inner loop. Only when the profile shows the "
             "kernel waiting on DMAs."),
    Strategy("scalar-prefetch", "memory",
             "Pass ragged metadata (group sizes, page tables, lengths) through PrefetchScalarGridSpec so index "
             "maps can read it from SMEM and skip empty blocks.", ("ragged", "paged", "sparse", "moe", "grouped")),
    Strategy("skip-masked-blocks", "algorithm",
             "Skip grid steps whose blocks are fully masked (causal or sparse) with pl.when, and clamp their "
             "index maps to a block already in VMEM so no copy is issued.", ("attention", "sparse")),
    Strategy("vmem-budget", "memory",
             "Re-size the blocks against the chip's scoped VMEM (chip_specs): count inputs, outputs and scratch "
             "twice for double buffering and leave headroom; raise vmem_limit_bytes only if needed."),
    Strategy("fewer-relayouts", "layout",
             "Avoid reshapes and transposes of blocks inside the kernel body (they cost relayouts on the VPU); "
             "choose block shapes whose last two dims are used as they come."),
    Strategy("chunked-scan", "algorithm",
             "Process the sequence in chunks: an intra-chunk matmul form plus a carried inter-chunk state in a "
             "VMEM scratch along an 'arbitrary' grid axis.", ("retention", "ssd", "scan", "mamba")),
)


def by_name(name: str, extra: list[dict] | None = None) -> Strategy | None:
    for s in (*LIBRARY, FIRST_VERSION, PROFILER, *(_from_row(r) for r in extra or [])):
        if s.name == name:
            return s
    return None


def _from_row(row: dict) -> Strategy:
    return Strategy(row["name"], row.get("family") or "person", row["text"])


class StrategySampler:
    """Picks strategies for a parent's children: a person's new ones first, then the profiler's advice, then
    library techniques this parent has not had, at random from a seeded RNG."""

    def __init__(self, operator: str, extra: list[dict] | None = None):
        self.operator = operator
        self.library = [s for s in LIBRARY if s.applies_to(operator)]
        self.person = [_from_row(r) for r in extra or []]

    def pick(self, rng: random.Random, parent, k: int, tried: set[str] = frozenset()) -> list[Strategy]:
        """`k` strategies for children of `parent` (a Node or None), avoiding names in `tried`."""
        if parent is None:
            first = [FIRST_VERSION] if FIRST_VERSION.name not in tried else []
            rest = [s for s in self.library if s.name not in tried]
            chosen = first + rng.sample(rest, min(len(rest), max(k - len(first), 0)))
        else:
            ordered = [s for s in self.person if s.name not in tried]
            if getattr(parent, "advice", None) and PROFILER.name not in tried:
                ordered.append(PROFILER)
            rest = [s for s in self.library if s.name not in tried]
            chosen = ordered[:k] + rng.sample(rest, min(len(rest), max(k - len(ordered), 0)))
        while len(chosen) < k:  # every technique was tried on this parent: repeat some, still seeded
            chosen.append(rng.choice(self.library or [FIRST_VERSION]))
        return chosen[:k]

    @staticmethod
    def advice(strategy: Strategy, parent) -> str:
        """The text the planner receives (its {advice?} slot) for a child built with `strategy`."""
        lines = [f"Technique to apply ({strategy.name}, {strategy.family}): {strategy.text}"]
        if parent is not None:
            lines.append(f"Start from the parent kernel (node {parent.id}, {_speed(parent)}), in parent_kernel.py "
                         "in the workspace; keep what works and change what the technique needs.")
            if parent.advice:
                lines.append("Profiler's reading of the parent kernel:\n" + parent.advice.strip()[:2000])
        return "\n".join(lines)


def _speed(node) -> str:
    return f"{node.speedup:.3g}x vs baseline" if node.speedup is not None else node.verdict or "not judged"
