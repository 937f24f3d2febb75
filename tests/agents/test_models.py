"""Model choice: clear errors before any work when a model cannot be reached; replay and per-role models."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from maxkernel.agents.models import ModelConfigError, check_credentials, price_per_mtok, resolve_model
from maxkernel.agents.replay import ReplayLlm
from maxkernel.agents.resilience import ResilientLlm
from google.adk.models.google_llm import Gemini
from maxkernel.settings import Settings

pytestmark = pytest.mark.unit

_CREDENTIALS = ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT",
                "GOOGLE_CLOUD_LOCATION", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


@pytest.fixture(autouse=True)
def no_credentials(monkeypatch):
    """Settings see only what a test passes: no credentials from the caller's environment or a .env file."""
    for name in _CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("MAXKERNEL_") and n != "MAXKERNEL_CACHE_DIR"]:
        monkeypatch.delenv(name)


def settings(**values) -> Settings:
    return Settings(_env_file=None, **values)


@pytest.fixture
def litellm_installed(tmp_path, monkeypatch):
    """Make `litellm` findable (an empty package) so the key check, not the install check, decides."""
    if "litellm" not in sys.modules and importlib.util.find_spec("litellm") is None:
        (tmp_path / "litellm").mkdir()
        (tmp_path / "litellm" / "__init__.py").write_text("")
        monkeypatch.syspath_prepend(str(tmp_path))


def test_gemini_without_api_key_says_what_to_set():
    with pytest.raises(ModelConfigError) as err:
        resolve_model("planner", settings(model="gemini-2.5-flash"))
    msg = str(err.value)
    assert "gemini-2.5-flash" in msg and "GOOGLE_API_KEY" in msg and "GOOGLE_GENAI_USE_VERTEXAI" in msg
    assert "replay" in msg  # the offline way out is named too


def _inner(model):
    """The model inside the retry/timeout wrapper every role gets."""
    assert isinstance(model, ResilientLlm), model
    return model.inner


def test_gemini_with_api_key_resolves_to_the_name():
    for key in ("GOOGLE_API_KEY", "GEMINI_API_KEY"):
        model = resolve_model("planner", settings(model="gemini-2.5-flash", **{key: "k"}))
        assert isinstance(_inner(model), Gemini) and model.model == _inner(model).model == "gemini-2.5-flash"
    with pytest.raises(ModelConfigError):
        check_credentials("gemini-2.5-flash", settings(GOOGLE_API_KEY=""))


def test_gemini_on_vertex_needs_a_project():
    with pytest.raises(ModelConfigError) as err:
        check_credentials("gemini-2.5-pro", settings(GOOGLE_GENAI_USE_VERTEXAI=True))
    assert "Vertex AI" in str(err.value) and "GOOGLE_CLOUD_PROJECT" in str(err.value)
    vertex = settings(GOOGLE_GENAI_USE_VERTEXAI=True, GOOGLE_CLOUD_PROJECT="p", GOOGLE_CLOUD_LOCATION="us-central1")
    check_credentials("gemini-2.5-pro", vertex)  # no API key needed on Vertex
    assert _inner(resolve_model("planner", settings(model="gemini-2.5-pro", GOOGLE_GENAI_USE_VERTEXAI=True,
                                                    GOOGLE_CLOUD_PROJECT="p"))).model == "gemini-2.5-pro"


def test_litellm_string_without_litellm_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "litellm", None)  # hidden even where it is installed
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with pytest.raises(ModelConfigError) as err:
        resolve_model("planner", settings(model="openai/gpt-5"))
    assert "litellm" in str(err.value) and "pip install" in str(err.value)


def test_litellm_string_without_its_key(litellm_installed, monkeypatch):
    with pytest.raises(ModelConfigError) as err:
        check_credentials("anthropic/claude-sonnet-4-5", settings())
    assert "ANTHROPIC_API_KEY" in str(err.value)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    check_credentials("anthropic/claude-sonnet-4-5", settings())
    check_credentials("ollama_chat/llama3", settings())  # a local server needs no key


@pytest.mark.parametrize("name", ["gpt-5", "claude", "replay2", ""])
def test_unknown_model_names(name):
    with pytest.raises(ModelConfigError) as err:
        resolve_model("planner", settings(model=name))
    assert "unknown model" in str(err.value) and "replay" in str(err.value)


def test_replay_resolves_per_role():
    model = _inner(resolve_model("debugger", settings(model="replay")))
    assert isinstance(model, ReplayLlm) and model.role == "debugger" and model.model == "replay"


def test_role_models_override_per_role():
    s = settings(model="replay", role_models={"planner": "gemini-2.5-pro"}, GOOGLE_API_KEY="k")
    assert _inner(resolve_model("planner", s)).model == "gemini-2.5-pro"
    assert isinstance(_inner(resolve_model("implementer", s)), ReplayLlm)
    # An explicit override (the CLI's --model) beats both.
    assert _inner(resolve_model("planner", s, override="replay")).role == "planner"
    # A role's own model is checked like any other: no key, clear error, even when the default is replay.
    with pytest.raises(ModelConfigError, match="GOOGLE_API_KEY"):
        resolve_model("planner", settings(model="replay", role_models={"planner": "gemini-2.5-pro"}))


def test_role_models_from_json_environment(monkeypatch):
    monkeypatch.setenv("MAXKERNEL_ROLE_MODELS", '{"profiler": "replay"}')
    monkeypatch.setenv("MAXKERNEL_MODEL", "gemini-2.5-flash")
    s = settings()
    assert isinstance(_inner(resolve_model("profiler", s)), ReplayLlm)
    with pytest.raises(ModelConfigError):
        resolve_model("planner", s)


def test_build_app_refuses_before_any_work(monkeypatch):
    from maxkernel.agents import build_app
    from maxkernel.settings import get_settings

    monkeypatch.setenv("MAXKERNEL_MODEL", "gemini-2.5-flash")
    get_settings.cache_clear()
    try:
        with pytest.raises(ModelConfigError, match="GOOGLE_API_KEY"):
            build_app("auto")
        assert build_app("hitl", model="replay").name == "hitl"
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


def test_prices():
    assert price_per_mtok("replay") == (0.0, 0.0)
    assert price_per_mtok("gemini-2.5-flash-001") == price_per_mtok("gemini-2.5-flash")
    assert price_per_mtok("gemini-2.5-flash-lite-preview") == price_per_mtok("gemini-2.5-flash-lite") != \
        price_per_mtok("gemini-2.5-flash")
    assert price_per_mtok("ollama_chat/llama3") is None
