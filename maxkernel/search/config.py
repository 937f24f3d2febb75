"""The frozen configuration of one search: its scoreboard (task, size, seeds, tolerances), algorithm and limits."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["SearchConfig", "Limits", "ParallelParams", "BeamParams", "EvolveParams", "ConfigMismatch",
           "SCOREBOARD_FIELDS", "make_config"]


class ConfigMismatch(ValueError):
    """A resumed search was asked to change what its nodes were scored against."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Limits(_Frozen):
    """Budgets and concurrency; the only part of a config a resumed search may change."""

    max_nodes: int = Field(12, ge=1, description="Nodes the search may create in all.")
    max_tokens: int | None = Field(None, ge=1, description="No new node starts past this many model tokens.")
    max_cost_usd: float | None = Field(None, gt=0, description="No new node starts past this estimated spend.")
    max_wall_s: float | None = Field(None, gt=0, description="No new node starts after this much search time.")
    workers: int = Field(2, ge=1, description="Nodes in flight at once.")
    model_workers: int = Field(2, ge=1, description="Model calls in flight at once.")
    eval_workers: int = Field(1, ge=1, description="Device evaluations at once (one TPU judges one kernel).")
    max_debug_rounds: int = Field(2, ge=0, description="Debugger turns per node after a failed check.")


class ParallelParams(_Frozen):
    runs: int = Field(2, ge=1, description="Independent autonomous runs.")
    depth: int = Field(2, ge=1, description="Iterations per run.")


class BeamParams(_Frozen):
    width: int = Field(2, ge=1, description="Nodes kept per generation.")
    branches: int = Field(2, ge=1, description="Children per kept node.")
    depth: int = Field(3, ge=1, description="Generations.")
    keep: Literal["improvements", "regressions"] = Field(
        "improvements", description="improvements: a child enters only by beating its parent (parents stay); "
                                    "regressions: the best children move on even when slower.")


class EvolveParams(_Frozen):
    islands: int = Field(2, ge=1)
    population: int = Field(2, ge=1, description="Children per island per generation.")
    generations: int = Field(3, ge=1)
    migration_interval: int = Field(2, ge=1, description="Every this many generations the best move on.")
    migrants: int = Field(1, ge=0, description="Best kernels each island sends to the next one.")
    archive_size: int = Field(8, ge=1, description="Diverse kernels kept by (technique, speedup band).")
    exploit: float = Field(0.7, ge=0.0, le=1.0, description="Chance a parent is the island's best, not an archive pick.")


# What every node is scored against: a resumed search must keep these exactly.
SCOREBOARD_FIELDS = ("task", "task_digest", "size", "chip", "seeds", "heldout_seeds", "tolerances", "reps",
                     "compile_size", "backend", "algorithm", "seed", "parallel", "beam", "evolve")


class SearchConfig(_Frozen):
    task: str = Field(description="Suite task name or task folder path.")
    task_digest: str = Field(description="Hash of the task's baseline; a changed task is a different scoreboard.")
    operator: str = ""
    size: str = "smoke"
    chip: str = "v5e"
    seeds: tuple[int, ...] = (0, 1, 2)
    heldout_seeds: tuple[int, ...] = Field(description="Seeds only the final verdict sees.")
    tolerances: dict[str, float] = Field(description="The task's fixed error bound per output dtype.")
    reps: int = Field(5, ge=1, description="Timed repetitions per scored kernel.")
    compile_size: Literal["smoke", "full"] = "full"
    eval_timeout_s: float = Field(300.0, gt=0)

    algorithm: Literal["parallel", "beam", "evolve"] = "beam"
    seed: int = 0
    model: str | None = None
    profile: bool = Field(True, description="Ask the profiler for advice on each correct kernel.")
    dedupe: bool = Field(True, description="Reuse the verdict of an identical kernel source.")
    final_candidates: int = Field(3, ge=1, description="Correct nodes tried, best first, on the held-out seeds.")

    backend: Literal["local", "ray"] = "local"
    ray_address: str | None = Field(None, description="Existing cluster ('auto' or host:port); none starts one.")
    ray_resource: str = Field("maxkernel_device", description="Ray resource an accelerator host advertises.")

    parallel: ParallelParams = ParallelParams()
    beam: BeamParams = BeamParams()
    evolve: EvolveParams = EvolveParams()
    limits: Limits = Limits()

    @model_validator(mode="after")
    def _disjoint_seeds(self) -> "SearchConfig":
        if set(self.seeds) & set(self.heldout_seeds):
            raise ValueError(f"held-out seeds {self.heldout_seeds} overlap the scoring seeds {self.seeds}")
        if not self.seeds or not self.heldout_seeds:
            raise ValueError("a search needs scoring seeds and held-out seeds")
        return self

    def scoreboard(self) -> dict:
        data = self.model_dump(mode="json")
        return {k: data[k] for k in SCOREBOARD_FIELDS}

    def resumed_with(self, requested: "SearchConfig | None") -> "SearchConfig":
        """This stored config with `requested`'s limits, model and options; refuses any scoreboard change."""
        if requested is None:
            return self
        mine, theirs = self.scoreboard(), requested.scoreboard()
        changed = [k for k in SCOREBOARD_FIELDS if mine[k] != theirs[k]]
        if changed:
            detail = ", ".join(f"{k}: {mine[k]!r} -> {theirs[k]!r}" for k in changed)
            raise ConfigMismatch(f"this folder holds a search scored on other settings ({detail}); "
                                 "use a new --out, or repeat the original settings to resume")
        return self.model_copy(update={"limits": requested.limits, "model": requested.model,
                                       "profile": requested.profile, "ray_address": requested.ray_address,
                                       "final_candidates": requested.final_candidates})


def make_config(task: str, *, size: str = "smoke", algorithm: str = "beam", seed: int = 0, model: str | None = None,
                backend: str = "local", limits: dict | None = None, **options) -> SearchConfig:
    """A config whose scoreboard comes from the task and the settings (seeds, held-out seeds, tolerances)."""
    from maxkernel.settings import get_settings
    from maxkernel.tasks import DEFAULT_TOLERANCE, load_task

    s = get_settings()
    t = load_task(task)
    if size not in t.sizes:
        raise ValueError(f"task {t.name} has no size {size!r} (has {', '.join(t.sizes)})")
    spec = t.name if t.source == "jaxbench" else str(t.path)
    options.setdefault("chip", s.chip)
    options.setdefault("eval_timeout_s", s.eval_timeout_s)
    limits = {"max_debug_rounds": s.max_debug_rounds, **(limits or {})}
    return SearchConfig(task=spec, task_digest=t.digest, operator=str(t.config.get("operator", "")), size=size,
                        seeds=tuple(range(s.eval_seeds)),
                        heldout_seeds=tuple(range(s.heldout_seed_base, s.heldout_seed_base + s.eval_seeds)),
                        tolerances={d: t.tolerance(d) for d in DEFAULT_TOLERANCE}, algorithm=algorithm, seed=seed,
                        model=model, backend=backend, limits=Limits(**limits), **options)
