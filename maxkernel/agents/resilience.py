"""Every model call survives what real endpoints do: 429s, 503s, hangs and dropped connections.

`ResilientLlm` wraps any ADK model (Gemini, LiteLLM, the offline ones) behind the same BaseLlm interface and
owns the retry policy, so retries are counted where the usage plugin can see them: each call has a
per-attempt timeout, transient errors are retried with exponential backoff and jitter (a server's
Retry-After / RetryInfo delay is honoured, capped), and the provider's own hidden retries are switched off
(HttpRetryOptions(attempts=1) on the request; ADK maps it to LiteLLM's num_retries too) so a 429 is seen once,
here. What a call went through rides on the response's custom_metadata["maxkernel_retries"].
"""

from __future__ import annotations

import asyncio
import random
import re
from typing import AsyncGenerator

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

__all__ = ["ResilientLlm", "ModelCallError", "is_transient", "RETRY_KEY"]

RETRY_KEY = "maxkernel_retries"
_TRANSIENT_CODES = {408, 409, 429, 500, 502, 503, 504}
_TRANSIENT_NAMES = ("ratelimit", "timeout", "serviceunavailable", "apiconnection", "internalserver", "overloaded",
                    "resourceexhausted", "connecterror", "readerror", "remoteprotocol")


class ModelCallError(RuntimeError):
    """A model call that failed for good: a non-transient error, or every attempt used."""


def _code(exc: BaseException) -> int | None:
    for attr in ("code", "status_code", "http_status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    return None


def is_transient(exc: BaseException) -> bool:
    """Worth another attempt: rate limits, overload, server errors, timeouts, dropped connections."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    code = _code(exc)
    if code is not None:
        return code in _TRANSIENT_CODES
    name = type(exc).__name__.lower()
    return any(n in name for n in _TRANSIENT_NAMES)


def _server_delay(exc: BaseException) -> float | None:
    """The wait a server asked for (Gemini's RetryInfo "retryDelay": "17s", an HTTP Retry-After header)."""
    m = re.search(r"retryDelay['\"]?\s*[:=]\s*['\"]?(\d+(?:\.\d+)?)s", str(getattr(exc, "details", "")) + str(exc))
    if m:
        return float(m.group(1))
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        return float(headers.get("retry-after")) if headers.get("retry-after") else None
    except (TypeError, ValueError):
        return None


def _describe(exc: BaseException) -> str:
    code = _code(exc)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timeout"
    return f"http_{code}" if code else type(exc).__name__


class ResilientLlm(BaseLlm):
    """Retries, backoff and a per-attempt timeout around `inner`; counted on the response it returns."""

    inner: BaseLlm
    attempts: int = 6
    initial_delay_s: float = 2.0
    max_delay_s: float = 60.0
    timeout_s: float = 180.0

    @classmethod
    def supported_models(cls) -> list[str]:
        return []

    def _prepare(self, llm_request: LlmRequest) -> None:
        config = llm_request.config or types.GenerateContentConfig()
        http = config.http_options or types.HttpOptions()
        # The transport gives up a little after we would, and never retries behind our back.
        if http.timeout is None:
            http.timeout = int((self.timeout_s + 5) * 1000)
        http.retry_options = types.HttpRetryOptions(attempts=1)
        config.http_options = http
        llm_request.config = config

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        self._prepare(llm_request)
        retries: list[dict] = []
        for attempt in range(1, self.attempts + 1):
            produced = False
            gen = self.inner.generate_content_async(llm_request, stream=stream)
            try:
                while True:
                    try:
                        response = await asyncio.wait_for(gen.__anext__(), timeout=self.timeout_s)
                    except StopAsyncIteration:
                        break
                    if not response.partial:
                        response.custom_metadata = {**(response.custom_metadata or {}), RETRY_KEY: retries}
                    produced = True
                    yield response
                return
            except Exception as exc:  # noqa: BLE001 - classified below; anything else ends the call
                if produced or not is_transient(exc) or attempt == self.attempts:
                    what = "gave up after" if is_transient(exc) else "failed (not retryable) on"
                    raise ModelCallError(f"model {self.model} {what} attempt {attempt}/{self.attempts}: "
                                         f"{_describe(exc)}: {str(exc)[:300]}") from exc
                wait = _server_delay(exc)
                backoff = min(self.max_delay_s, self.initial_delay_s * 2 ** (attempt - 1))
                wait = min(self.max_delay_s, wait) if wait is not None else backoff * (0.5 + random.random() / 2)
                message = f"no answer within {self.timeout_s:g} s" if _describe(exc) == "timeout" else str(exc)
                retries.append({"attempt": attempt, "error": _describe(exc), "message": message[:200],
                                "wait_s": round(wait, 2)})
                await asyncio.sleep(wait)
            finally:
                await gen.aclose()
