"""An ADK plugin that counts LLM calls, tokens (prompt, output, thought, cached), retries and estimated
dollars per session, in session state; model-call faults (retried 429s, timeouts) go to state['faults']."""

from __future__ import annotations

import logging

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin

from maxkernel.agents.models import price_per_mtok

__all__ = ["UsagePlugin", "USAGE_KEY", "FAULTS_KEY", "INJECTED_KEY", "empty_usage", "record_fault"]

USAGE_KEY = "usage"
FAULTS_KEY = "faults"  # handled faults: {kind, role, iteration, handled}
INJECTED_KEY = "faults_injected"  # what the fault-injecting model says it injected
_log = logging.getLogger("maxkernel.usage")
_warned: set[str] = set()


def empty_usage() -> dict:
    return {"llm_calls": 0, "retries": 0, "prompt_tokens": 0, "output_tokens": 0, "thought_tokens": 0,
            "cached_tokens": 0, "tokens": 0, "cost_usd": 0.0, "priced": True, "unpriced_models": [],
            "prompt_tokens_per_call": [], "calls": [], "max_prompt_tokens_per_call": 0, "by_model": {}}


def _model_name(ctx: CallbackContext) -> str:
    agent = ctx._invocation_context.agent  # the agent whose model answered
    model = getattr(agent, "model", "")
    return model if isinstance(model, str) else getattr(model, "model", type(model).__name__)


def record_fault(state, kind: str, handled: str, **where) -> None:
    """Append one handled fault to state['faults'] (state: a session's or a callback context's state)."""
    faults = list(state.get(FAULTS_KEY) or [])
    faults.append({"kind": kind, "iteration": state.get("iteration"), **where, "handled": handled})
    state[FAULTS_KEY] = faults


class UsagePlugin(BasePlugin):
    """Adds each model response's usage to state['usage']; cost is an estimate from a price table."""

    def __init__(self):
        super().__init__(name="maxkernel_usage")

    async def after_model_callback(self, *, callback_context: CallbackContext,
                                   llm_response: LlmResponse) -> LlmResponse | None:
        from maxkernel.agents.replay.faulty import INJECTED_KEY as MODEL_INJECTED
        from maxkernel.agents.resilience import RETRY_KEY

        if llm_response.partial:
            return None
        state = callback_context.state
        meta = llm_response.usage_metadata
        prompt = int(getattr(meta, "prompt_token_count", 0) or 0)
        output = int(getattr(meta, "candidates_token_count", 0) or 0)
        thought = int(getattr(meta, "thoughts_token_count", 0) or 0)
        cached = int(getattr(meta, "cached_content_token_count", 0) or 0)
        name = _model_name(callback_context)
        role = callback_context.agent_name
        usage = {**empty_usage(), **dict(state.get(USAGE_KEY) or {})}
        usage["by_model"] = dict(usage.get("by_model") or {})
        usage["llm_calls"] += 1
        usage["prompt_tokens"] += prompt
        usage["output_tokens"] += output
        usage["thought_tokens"] += thought
        usage["cached_tokens"] += cached  # part of prompt_tokens, billed at a discount: priced as prompt here
        usage["tokens"] = usage["prompt_tokens"] + usage["output_tokens"] + usage["thought_tokens"]
        usage["prompt_tokens_per_call"] = list(usage["prompt_tokens_per_call"]) + [prompt]
        usage["calls"] = list(usage["calls"]) + [[state.get("iteration") or 0, role, prompt]]
        usage["max_prompt_tokens_per_call"] = max(usage["max_prompt_tokens_per_call"], prompt)
        price = price_per_mtok(name)
        if price is None:
            usage["priced"] = False
            if name not in usage["unpriced_models"]:
                usage["unpriced_models"] = list(usage["unpriced_models"]) + [name]
            if name not in _warned:
                _warned.add(name)
                _log.warning("model %s has no price in maxkernel's table: cost is unknown, and max_cost_usd is "
                             "enforced as a token budget (MAXKERNEL_UNPRICED_USD_PER_MTOK)", name)
        else:  # thought tokens are billed as output
            usage["cost_usd"] = round(usage["cost_usd"] + (prompt * price[0] + (output + thought) * price[1]) / 1e6, 6)
        per = dict(usage["by_model"].get(name) or {"llm_calls": 0, "tokens": 0})
        per["llm_calls"] += 1
        per["tokens"] += prompt + output + thought
        usage["by_model"][name] = per
        custom = llm_response.custom_metadata or {}
        for r in custom.get(RETRY_KEY) or []:
            usage["retries"] += 1
            record_fault(state, r["error"], f"retried after {r['wait_s']} s (attempt {r['attempt']} failed)",
                         role=role, message=r.get("message", ""))
        if custom.get(MODEL_INJECTED):
            state[INJECTED_KEY] = list(state.get(INJECTED_KEY) or []) + list(custom[MODEL_INJECTED])
        state[USAGE_KEY] = usage
        return None
