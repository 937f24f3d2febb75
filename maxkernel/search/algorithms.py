"""Search algorithms as generation planners: given the graph so far, the next generation's proposals.

Each generation is decided only from finished earlier generations, the steering marks (pins, prunes) and an
RNG seeded by (search seed, algorithm, generation, island), so a resumed search plans what it would have
planned; a generation once written to the graph is never re-planned.
"""

from __future__ import annotations

import math
import random

from maxkernel.search.config import SearchConfig
from maxkernel.search.graph import Node, Proposal
from maxkernel.search.strategies import FIRST_VERSION, StrategySampler

__all__ = ["Algorithm", "Parallel", "Beam", "Evolve", "build_algorithm", "ALGORITHMS"]


def _rank(node: Node) -> tuple:
    return (-(node.speedup or 0.0), node.id)


def _live(nodes: list[Node]) -> list[Node]:
    return [n for n in nodes if not n.pruned]


def _correct(nodes: list[Node]) -> list[Node]:
    return sorted((n for n in _live(nodes) if n.correct), key=_rank)


class Algorithm:
    name = ""

    def __init__(self, config: SearchConfig):
        self.config = config

    def rng(self, gen: int, lane: int = 0) -> random.Random:
        return random.Random(f"{self.config.seed}/{self.name}/{gen}/{lane}")

    def generations(self) -> int:
        raise NotImplementedError

    def propose(self, gen: int, nodes: list[Node], sampler: StrategySampler) -> list[Proposal]:
        """The proposals of generation `gen` (nodes holds every earlier generation); [] when there is nothing to do."""
        raise NotImplementedError

    # -- shared helpers -----------------------------------------------------------------------------------
    @staticmethod
    def tried(parent: Node | None, nodes: list[Node], lane: int | None = None) -> set[str]:
        pid = parent.id if parent else None
        return {n.strategy for n in nodes if n.parent == pid and (lane is None or n.island == lane)}

    @staticmethod
    def child(sampler: StrategySampler, strategy, parent: Node | None, island: int = 0) -> Proposal:
        return Proposal(parent.id if parent else None, strategy.name, sampler.advice(strategy, parent),
                        strategy.family, island)

    def children(self, sampler, rng, parent, k, nodes, island=0, lane=None, planned=()) -> list[Proposal]:
        tried = self.tried(parent, nodes, lane) | {p.strategy for p in planned
                                                    if p.parent == (parent.id if parent else None)}
        return [self.child(sampler, s, parent, island) for s in sampler.pick(rng, parent, k, tried)]


class Parallel(Algorithm):
    """N independent autonomous runs (one island each): each iteration refines its run's best kernel."""

    name = "parallel"

    def generations(self) -> int:
        return self.config.parallel.depth

    def propose(self, gen, nodes, sampler):
        if gen >= self.generations():
            return []
        out = []
        for run in range(self.config.parallel.runs):
            mine = [n for n in nodes if n.island == run]
            if mine and not _live(mine):
                continue  # a person pruned this whole run
            pinned = [n for n in _correct(mine) if n.pinned]
            best = (pinned or _correct(mine) or [None])[0]
            # Runs differ from their first kernel on: only run 0 starts from the plain first version.
            seen = self.tried(best, nodes, lane=run) | ({FIRST_VERSION.name} if best is None and run else set())
            s = sampler.pick(self.rng(gen, run), best, 1, seen)[0]
            out.append(self.child(sampler, s, best, island=run))
        return out


class Beam(Algorithm):
    """Keep the `width` best kernels; give each `branches` children per generation, for `depth` generations."""

    name = "beam"

    def generations(self) -> int:
        return self.config.beam.depth

    def beam(self, gen: int, nodes: list[Node]) -> list[Node]:
        """The kernels generation `gen` expands, replayed from the finished generations before it."""
        p = self.config.beam
        by_id = {n.id: n for n in nodes}
        beam: list[Node] = []
        for g in range(gen):
            kids = _correct([n for n in nodes if n.gen == g])
            if p.keep == "improvements":
                better = [c for c in kids if (c.speedup or 0.0) > ((by_id[c.parent].speedup or 0.0) if c.parent else 0.0)]
                pool = [by_id[b.id] for b in beam if not by_id[b.id].pruned] + better
            else:
                pool = kids or [by_id[b.id] for b in beam if not by_id[b.id].pruned]
            beam = sorted(pool, key=_rank)[:p.width]
        pinned = [n for n in _correct(nodes) if n.pinned and n.id not in {b.id for b in beam}]
        return pinned + beam

    def propose(self, gen, nodes, sampler):
        p = self.config.beam
        if gen >= self.generations():
            return []
        beam = self.beam(gen, nodes) if gen else []
        if not beam:  # the start, or nothing correct yet: fresh kernels from the task
            return self.children(sampler, self.rng(gen), None, p.width * p.branches, nodes)
        out: list[Proposal] = []
        for i, parent in enumerate(beam):
            out += self.children(sampler, self.rng(gen, i), parent, p.branches, nodes, planned=out)
        return out


class Evolve(Algorithm):
    """Islands evolving in parallel, the best migrating round a ring, and an archive of diverse good kernels
    (best per technique family and speedup band) that explore steps sample parents from."""

    name = "evolve"

    def generations(self) -> int:
        return self.config.evolve.generations

    def members(self, island: int, gen: int, nodes: list[Node]) -> list[Node]:
        """Correct kernels island `island` may breed from at generation `gen`: its own plus migrants."""
        p = self.config.evolve
        own = [n for n in nodes if n.island == island and n.gen < gen]
        migrants: list[Node] = []
        if p.islands > 1 and p.migrants:
            source = (island - 1) % p.islands
            for when in range(p.migration_interval, gen + 1, p.migration_interval):
                migrants += _correct([n for n in nodes if n.island == source and n.gen < when])[:p.migrants]
        return _correct(list({n.id: n for n in own + migrants}.values()))

    def archive(self, gen: int, nodes: list[Node]) -> list[Node]:
        cells: dict[tuple, Node] = {}
        for n in _correct([n for n in nodes if n.gen < gen]):
            band = math.floor(2 * math.log2(max(n.speedup or 1e-9, 1e-9)))
            key = (n.family or n.strategy, band)
            if key not in cells:  # _correct is best-first, so the first seen is the cell's best
                cells[key] = n
        return sorted(cells.values(), key=_rank)[:self.config.evolve.archive_size]

    def propose(self, gen, nodes, sampler):
        p = self.config.evolve
        if gen >= self.generations():
            return []
        archive = self.archive(gen, nodes)
        out: list[Proposal] = []
        for island in range(p.islands):
            rng = self.rng(gen, island)
            members = self.members(island, gen, nodes)
            pinned = [n for n in members if n.pinned] + [n for n in archive if n.pinned and n not in members]
            for j in range(p.population):
                if pinned and j < len(pinned):
                    parent = pinned[j]
                elif members and (rng.random() < p.exploit or not archive):
                    a, b = rng.choice(members), rng.choice(members)  # a size-2 tournament
                    parent = min(a, b, key=_rank)
                elif archive:
                    parent = rng.choice(archive)
                else:
                    parent = None
                out += self.children(sampler, rng, parent, 1, nodes, island=island, planned=out)
        return out


ALGORITHMS = {a.name: a for a in (Parallel, Beam, Evolve)}


def build_algorithm(config: SearchConfig) -> Algorithm:
    return ALGORITHMS[config.algorithm](config)
