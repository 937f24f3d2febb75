"""The one settings object: every MAXKERNEL_* variable and .env entry is read here and nowhere else."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_DATA = Path.home() / ".local" / "share" / "maxkernel"

__all__ = ["Settings", "get_settings"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MAXKERNEL_", env_file=".env", extra="ignore", env_ignore_empty=True)

    # Harness
    cache_dir: Path = Field(default=Path.home() / ".cache" / "maxkernel",
                            description="Reference outputs and compile caches; hidden from candidate code.")
    sandbox: str = Field(default="auto", description="auto | bwrap | none (none runs candidates with rlimits only).")
    sandbox_env: str = Field(default="", description="Comma-separated names of extra environment variables a sandboxed "
                             "job may see (nothing else passes but what the job needs); every verdict lists them.")
    eval_seeds: int = Field(default=3, ge=1, description="Seeds per evaluation.")
    heldout_seed_base: int = Field(default=7919, description="First seed of the held-out set used for final verdicts.")
    eval_timeout_s: float = Field(default=300.0, gt=0, description="Wall-clock limit for one candidate run.")
    eval_memory_mb: int = Field(default=6144, ge=2048, description="Address-space limit of a candidate process.")
    pool_size: int = Field(default=1, ge=0, description="Pre-started sandboxed workers kept warm by long-lived callers "
                           "(an evaluation takes one for the candidate, and one for the judge when the judge is not "
                           "persistent); each costs a jax import of CPU, lost if nothing takes it before the caller "
                           "ends. A pool keeps one more ahead once verdicts come back to back (tables, tuning, search).")
    persistent_judge: bool = Field(default=True, description="The judge's side of a verdict (inputs, references, the "
                                   "baseline's timing, the census) runs on long-lived sandboxed judge workers that keep "
                                   "JAX imported; false starts a fresh judge for every verdict. The candidate's worker "
                                   "is fresh for every verdict either way.")
    debug: bool = Field(default=False, description="Print tracebacks for internal errors of the CLI.")

    # Models: "replay" (offline), any gemini-* name (API key or Vertex AI), or a LiteLLM "provider/model" string.
    model: str = Field(default="gemini-3.5-flash", description="Model for every agent unless role_models says otherwise.")
    role_models: dict[str, str] = Field(default_factory=dict,
                                        description='Per-role models, e.g. {"planner": "gemini-3.5-pro"} (JSON).')
    model_attempts: int = Field(default=6, ge=1, description="Tries per model call (transient errors: 429, 5xx, "
                                "timeouts, dropped connections) before the step counts as failed.")
    model_retry_initial_s: float = Field(default=2.0, ge=0, description="First backoff wait; doubles each retry, with "
                                         "jitter; a server's own retry delay is honoured.")
    model_retry_max_s: float = Field(default=60.0, ge=0, description="Longest single backoff wait.")
    model_timeout_s: float = Field(default=180.0, gt=0, description="Per-attempt limit of one model call.")
    fault_seed: int = Field(default=0, description="Seed of the fault-injecting offline model (--model faulty).")
    # Credentials are read here only to tell a user, before any work, that a model cannot be reached.
    google_api_key: SecretStr | None = Field(default=None, validation_alias=AliasChoices("GOOGLE_API_KEY", "GEMINI_API_KEY"))
    google_genai_use_vertexai: bool = Field(default=False, validation_alias="GOOGLE_GENAI_USE_VERTEXAI")
    google_cloud_project: str | None = Field(default=None, validation_alias="GOOGLE_CLOUD_PROJECT")
    google_cloud_location: str | None = Field(default=None, validation_alias="GOOGLE_CLOUD_LOCATION")

    # Agent state: embedded SQLite and local files by default; agentengine://ID and gs://bucket for teams.
    data_dir: Path = Field(default=_DATA, description="Sessions, artifacts and workspaces when no URI is given.")
    session_uri: str | None = Field(default=None, description="sqlite:///path, memory://, agentengine://ID, postgresql://...")
    artifact_uri: str | None = Field(default=None, description="file:///path, memory://, gs://bucket")
    drafts_dir: Path | None = Field(default=None, description="The folder a person's draft kernels and plans are read "
                                    "from in HITL sessions (use_draft); default: the folder the app was started in.")

    # The autonomous loop's budgets and stopping rules.
    allow_library_kernels: bool = Field(default=True, description="Whether a kernel may call a packaged kernel "
                                        "(jax.experimental.pallas.ops, tokamax); the verdict names it either way.")
    max_iterations: int = Field(default=4, ge=1)
    max_debug_rounds: int = Field(default=3, ge=0)
    patience: int = Field(default=2, ge=1, description="Stop after this many iterations without a faster kernel.")
    target_speedup: float | None = Field(default=None, description="Stop once a correct kernel is this much faster.")
    max_tokens: int | None = Field(default=None, description="Stop starting new steps past this many tokens.")
    max_cost_usd: float | None = Field(default=None, description="Stop starting new steps past this estimated cost; "
                                       "for a model without a price, the token budget below applies instead.")
    unpriced_usd_per_mtok: float = Field(default=10.0, gt=0, description="For max_cost_usd with a model that has no "
                                         "price: tokens are budgeted as if each million cost this much.")
    max_wall_s: float | None = Field(default=None)
    chip: str = Field(default="v5e", description="Target chip for compile checks, roofline, tuning and TPU estimates.")

    # TPU estimates off a TPU (libtpu's static LLO profile on shrunk shapes, floored by the roofline).
    estimate: bool = Field(default=True, description="Off a TPU, every verdict carries a TPU estimate for `chip` and the "
                           "loop, search and autotuner rank by it.")
    # Virtual address space: libtpu reserves far more than it touches; at 8192 the v6e profile of a 1024 x 4096 x 4096
    # XLA GEMM died with mmap error 12.
    estimate_memory_mb: int = Field(default=16384, ge=2048, description="Address-space guard of one profiling process.")
    estimate_timeout_s: float = Field(default=300.0, gt=0, description="Wall-clock limit of one profiling process.")
    estimate_max_gflop: float = Field(default=20.0, gt=0, description="Largest program (GFLOP) profiled; larger ones are "
                                      "shrunk along parallel dimensions and extrapolated.")
    estimate_max_mb: float = Field(default=512.0, gt=0, description="Same, for the HBM bytes a profiled program moves.")
    estimate_in_parts: bool = Field(default=False, description="Price every kernel in parts (each pallas_call alone, "
                                    "its grid cut, plus the XLA around them), not only one no task size shrinks whole.")


    allow_unisolated: bool = Field(default=False, description="Accept a 'correct' verdict from a run without the "
                                   "bubblewrap sandbox (isolation: none); off, such a kernel is 'rejected'.")
    sandbox_scratch_mb: int = Field(default=4096, ge=64, description="Cap of a job's scratch folder (a tmpfs of its "
                                    "own where the tool may mount one, i.e. as root).")
    sandbox_max_pids: int | None = Field(default=None, ge=16, description="Processes and threads one sandboxed job may "
                                         "have (default 256 + 4 per core; enforced where a pids cgroup can be made).")
    job_log: Path | None = Field(default=None, description="Append one JSON line per sandboxed job to this file (its "
                                 "kind, task, wall seconds, status and the calling process): where a run's time goes.")
    mcp_token: SecretStr | None = Field(default=None, description="Bearer token `maxkernel mcp --http` requires of "
                                        "clients (needed off localhost); --token overrides it.")

    @property
    def sandbox_env_names(self) -> list[str]:
        return [n.strip() for n in self.sandbox_env.split(",") if n.strip()]

    @field_validator("cache_dir", "data_dir", "drafts_dir", mode="after")
    @classmethod
    def _expand(cls, v: Path | None) -> Path | None:
        return v.expanduser() if v is not None else None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings, built once per process."""
    return Settings()
