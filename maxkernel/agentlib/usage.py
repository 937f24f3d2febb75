"""An ADK plugin that counts LLM calls, tokens and estimated dollars per session, in session state."""

from __future__ import annotations

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin

from maxkernel.agentlib.models import price_per_mtok

__all__ = ["UsagePlugin", "USAGE_KEY", "empty_usage"]

USAGE_KEY = "usage"


def empty_usage() -> dict:
    return {"llm_calls": 0, "prompt_tokens": 0, "output_tokens": 0, "tokens": 0, "cost_usd": 0.0,
            "priced": True, "by_model": {}}


def _model_name(ctx: CallbackContext) -> str:
    agent = ctx._invocation_context.agent  # the agent whose model answered
    model = getattr(agent, "model", "")
    return model if isinstance(model, str) else getattr(model, "model", type(model).__name__)


class UsagePlugin(BasePlugin):
    """Adds each model response's usage to state['usage']; cost is an estimate from a price table."""

    def __init__(self):
        super().__init__(name="maxkernel_usage")

    async def after_model_callback(self, *, callback_context: CallbackContext,
                                   llm_response: LlmResponse) -> LlmResponse | None:
        if llm_response.partial:
            return None
        meta = llm_response.usage_metadata
        prompt = int(getattr(meta, "prompt_token_count", 0) or 0)
        output = int(getattr(meta, "candidates_token_count", 0) or 0)
        name = _model_name(callback_context)
        usage = dict(callback_context.state.get(USAGE_KEY) or empty_usage())
        usage["by_model"] = dict(usage.get("by_model") or {})
        usage["llm_calls"] += 1
        usage["prompt_tokens"] += prompt
        usage["output_tokens"] += output
        usage["tokens"] = usage["prompt_tokens"] + usage["output_tokens"]
        price = price_per_mtok(name)
        if price is None:
            usage["priced"] = False
        else:
            usage["cost_usd"] = round(usage["cost_usd"] + (prompt * price[0] + output * price[1]) / 1e6, 6)
        per = dict(usage["by_model"].get(name) or {"llm_calls": 0, "tokens": 0})
        per["llm_calls"] += 1
        per["tokens"] += prompt + output
        usage["by_model"][name] = per
        callback_context.state[USAGE_KEY] = usage
        return None
