"""Choosing each agent's model: Gemini (API key or Vertex AI), any LiteLLM string, or the offline replay."""

from __future__ import annotations

import importlib.util

from maxkernel.settings import Settings, get_settings

__all__ = ["ModelConfigError", "resolve_model", "model_name", "check_credentials", "missing_credentials",
           "price_per_mtok", "is_replay", "is_faulty", "MODEL_SETTINGS"]

# Where a refusal points: the settings that choose a real model and reach it.
MODEL_SETTINGS = ("MAXKERNEL_MODEL (or --model) to a gemini-* model with GOOGLE_API_KEY (Gemini API), or with "
                  "GOOGLE_GENAI_USE_VERTEXAI=TRUE, GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION (Vertex AI), in the "
                  "environment or .env")

# USD per million tokens (input, output); an estimate for reports, never a bill. Unknown models cost None.
_PRICES = {
    "gemini-3.5-pro": (1.25, 10.0), "gemini-3.5-flash": (0.30, 2.50), "gemini-2.5-pro": (1.25, 10.0),
    "gemini-2.5-flash": (0.30, 2.50), "gemini-2.5-flash-lite": (0.10, 0.40),
    "openai/gpt-5": (1.25, 10.0), "anthropic/claude-sonnet-4-5": (3.0, 15.0), "replay": (0.0, 0.0),
    "faulty": (0.0, 0.0),
}
# LiteLLM providers and the variable that holds their key (ollama and other local servers need none).
_PROVIDER_KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "mistral": "MISTRAL_API_KEY",
                  "groq": "GROQ_API_KEY", "deepseek": "DEEPSEEK_API_KEY", "together_ai": "TOGETHERAI_API_KEY",
                  "openrouter": "OPENROUTER_API_KEY"}


class ModelConfigError(RuntimeError):
    """The chosen model cannot be used here (no credentials, missing package): said before any work starts."""


def model_name(role: str | None = None, settings: Settings | None = None, override: str | None = None) -> str:
    s = settings or get_settings()
    if override:
        return override
    return (s.role_models or {}).get(role or "", s.model)


def is_replay(name: str) -> bool:
    """The offline models: the replay and the fault-injecting replay ("faulty", or "faulty:SEED")."""
    return name == "replay" or is_faulty(name)


def is_faulty(name: str) -> bool:
    return name == "faulty" or name.startswith("faulty:")


def check_credentials(name: str, settings: Settings | None = None) -> None:
    """Raise ModelConfigError with what to set when `name` cannot be reached with this configuration."""
    import os

    s = settings or get_settings()
    if is_replay(name):
        return
    if name.startswith("gemini"):
        if s.google_genai_use_vertexai:
            if not s.google_cloud_project:
                raise ModelConfigError(f"model {name} on Vertex AI needs GOOGLE_CLOUD_PROJECT (and GOOGLE_CLOUD_LOCATION)"
                                       " set, plus application-default credentials (gcloud auth application-default login)")
            return
        if s.google_api_key is None or not s.google_api_key.get_secret_value():
            raise ModelConfigError(f"model {name} needs GOOGLE_API_KEY (Gemini API), or GOOGLE_GENAI_USE_VERTEXAI=TRUE "
                                   "with GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION (Vertex AI); or use --model replay "
                                   "(MAXKERNEL_MODEL=replay) for the offline replay model")
        return
    if "/" in name:
        if importlib.util.find_spec("litellm") is None:
            raise ModelConfigError(f"model {name} is a LiteLLM model string: install it with pip install litellm")
        provider = name.split("/", 1)[0]
        key = _PROVIDER_KEYS.get(provider)
        # The provider's own variable is LiteLLM's to read; we only look whether it is there.
        if key and not os.environ.get(key):
            raise ModelConfigError(f"model {name} needs {key} set")
        return
    raise ModelConfigError(f"unknown model {name!r}: use a gemini-* name, a LiteLLM 'provider/model' string, replay, "
                           "or faulty (the replay with injected faults)")


def missing_credentials(roles, settings: Settings | None = None, override: str | None = None
                        ) -> tuple[str, str] | None:
    """(model name, why) for the first model `roles` would use that cannot be reached, or None when all can."""
    s = settings or get_settings()
    for name in dict.fromkeys(model_name(role, s, override) for role in roles):
        try:
            check_credentials(name, s)
        except ModelConfigError as exc:
            return name, str(exc)
    return None


def resolve_model(role: str, settings: Settings | None = None, override: str | None = None):
    """The model ADK should use for `role` (credentials checked first), inside the retry/timeout wrapper."""
    from maxkernel.agents.resilience import ResilientLlm

    s = settings or get_settings()
    name = model_name(role, s, override)
    check_credentials(name, s)
    timeout = s.model_timeout_s
    if is_faulty(name):
        from maxkernel.agents.replay.faulty import FaultyLlm

        seed = int(name.split(":", 1)[1]) if ":" in name else s.fault_seed
        inner = FaultyLlm(role=role, seed=seed)
        timeout = min(timeout, inner.call_timeout_s)  # its injected hang costs seconds, not minutes
    elif is_replay(name):
        from maxkernel.agents.replay import ReplayLlm

        inner = ReplayLlm(role=role)
    elif name.startswith("gemini"):
        from google.adk.models.google_llm import Gemini

        inner = Gemini(model=name)  # API key or Vertex AI from the environment, as google-genai reads it
    else:
        from google.adk.models.lite_llm import LiteLlm

        inner = LiteLlm(model=name)
    return ResilientLlm(model=inner.model, inner=inner, attempts=s.model_attempts,
                        initial_delay_s=s.model_retry_initial_s, max_delay_s=s.model_retry_max_s, timeout_s=timeout)


def price_per_mtok(name: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for `name`, or None when unknown."""
    # The longest known prefix: "gemini-2.5-flash-lite-001" is priced as flash-lite, not as flash.
    key = max((k for k in _PRICES if name.startswith(k)), key=len, default=None)
    return _PRICES[key] if key else None
