"""An app folder's App: the real one when its models can be reached, else one whose every answer says what to set."""

from __future__ import annotations

import logging
from typing import AsyncGenerator, Callable, Iterable

from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.apps import App
from google.adk.events import Event
from google.genai import types

from maxkernel.agents.models import missing_credentials

__all__ = ["app_or_setup", "SetupNeeded", "setup_message"]

logger = logging.getLogger(__name__)


def setup_message(name: str, why: str) -> str:
    """What the chat answers when no model can be reached: which and why, and the settings that fix it."""
    from maxkernel.agents.replay.model import scope

    # A Gemini model's reason lists the very settings named below; any other model's reason is its own.
    problem = f"{name} has no credentials" if name.startswith("gemini") else why
    return (f"No model is reachable for this app: {problem}. To chat, set MAXKERNEL_MODEL=replay for the offline "
            f"replay model ({scope()}), or for Gemini set GOOGLE_API_KEY, or GOOGLE_GENAI_USE_VERTEXAI=TRUE with "
            "GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION (Vertex AI), in the environment or a .env file; then "
            "restart `adk web maxkernel/apps`.")


class SetupNeeded(BaseAgent):
    """Answers every message with `message` (what to set); runs no sub-agent and no tool."""

    message: str

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        yield Event(author=self.name, invocation_id=ctx.invocation_id, branch=ctx.branch,
                    content=types.Content(role="model", parts=[types.Part(text=self.message)]))


def app_or_setup(name: str, roles: Iterable[str], build: Callable[[], App]) -> App:
    """`build()` when every model `roles` use can be reached; otherwise an App of that name whose root says, in the
    chat, what to set (instead of an app that cannot load and answers HTTP 500)."""
    problem = missing_credentials(list(roles))
    if problem is None:
        return build()
    message = setup_message(*problem)
    logger.warning("maxkernel app %s: %s", name, message)
    return App(name=name, root_agent=SetupNeeded(name=f"{name}_needs_a_model", message=message,
                                                 description="Says which model settings to set."))
