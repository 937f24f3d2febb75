"""The one settings object: every MAXKERNEL_* variable and .env entry is read here and nowhere else."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "get_settings"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MAXKERNEL_", env_file=".env", extra="ignore")

    # Harness
    cache_dir: Path = Field(default=Path.home() / ".cache" / "maxkernel",
                            description="Reference outputs and compile caches; hidden from candidate code.")
    sandbox: str = Field(default="auto", description="auto | bwrap | none (none runs candidates with rlimits only).")
    eval_seeds: int = Field(default=3, ge=1, description="Seeds per evaluation.")
    heldout_seed_base: int = Field(default=7919, description="First seed of the held-out set used for final verdicts.")
    eval_timeout_s: float = Field(default=300.0, gt=0, description="Wall-clock limit for one candidate run.")
    eval_memory_mb: int = Field(default=6144, ge=2048, description="Address-space limit of a candidate process.")
    pool_size: int = Field(default=1, ge=0, description="Pre-started sandboxed workers kept warm by long-lived callers.")
    debug: bool = Field(default=False, description="Print tracebacks for internal errors of the CLI.")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings, built once per process."""
    return Settings()
