"""The quota gate: each attempt waits for ``Config.quota``, holds its worst case, settles.

The retry loop calls :meth:`QuotaGate.admit` before every attempt (a retried attempt is one more
request against the provider's limit) and :meth:`QuotaGate.settle` or :meth:`QuotaGate.failed`
after it. The worst case held is the input estimate plus the output cap, the way providers count
a request against a tokens-per-minute limit before they know its answer.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import TYPE_CHECKING

from pollux._telemetry import record_quota_wait
from pollux.errors import RateLimitError
from pollux.media_tokens import source_tokens
from pollux.quota import DEFAULT_OUTPUT_TOKENS, QuotaRequest, key_id

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.interaction.output import Usage
    from pollux.providers.base import ProviderRequest
    from pollux.quota import CallQuota, QuotaPermit

__all__ = ["DEFAULT_PAUSE_S", "QuotaGate", "estimate_tokens"]

#: The pause every caller of a quota takes after a 429 that did not say how long to wait.
DEFAULT_PAUSE_S = 1.0

_CHARS_PER_TOKEN = 4.0
# What a provider adds around the text (roles, message boundaries): counted so the estimate
# errs high, never low.
_FRAMING_TOKENS = 16


# Sources whose bytes are what a provider reads as text; every other type is media, whose
# estimate is `media_tokens` (see `QuotaRequest`).
_TEXT_TYPES = frozenset(
    {"application/json", "application/xml", "application/yaml", "application/x-yaml",
     "application/x-ndjson", "application/javascript", "application/csv"}
)  # fmt: skip


def _is_text(mime_type: str) -> bool:
    mime = mime_type.split(";", 1)[0].strip().lower()
    return mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml"))


def estimate_tokens(
    request: ProviderRequest, default_output_tokens: int, provider: str, model: str | None
) -> tuple[int, int]:
    """The attempt's worst case (its input estimate plus its output cap), and its media part.

    The input (instructions, prompt, history, tool results, tool declarations, the output schema
    and text sources) is counted at four characters per token, the common rule of thumb for
    English text, plus a few tokens of message framing; the answer settles the hold to the
    tokens the provider reported. The second figure is the part from media sources: an image
    counts what ``provider``'s ``model`` charges for its size (the most any image costs there
    when it is remote or its size cannot be read), audio and video their duration
    (`pollux.media_tokens.source_tokens`), other media (PDFs, a clip whose duration is not read)
    their bytes at four per token. Media estimates may overstate what providers count, so a
    quota may hold its whole window for them instead of refusing the call.
    """
    chars = len(request.instructions or "") + len(request.input.content or "")
    media_bytes = 0
    counted = 0
    for source in request.sources.sources:
        if _is_text(source.mime_type):
            chars += max(0, source.size_bytes)
        elif (tokens := source_tokens(source, provider, model)) is not None:
            counted += tokens
        else:
            media_bytes += max(0, source.size_bytes)
    turn = request.input
    if turn.history:
        chars += sum(len(message.content or "") for message in turn.history)
    for result in turn.tool_results:
        chars += len(json.dumps(result.content, default=str, ensure_ascii=False))
    for tool in request.tools:
        chars += len(tool.name) + len(tool.description) + len(json.dumps(tool.parameters))
    schema = request.requirements.output_schema_json()
    if schema is not None:
        chars += len(json.dumps(schema))
    cap = request.requirements.max_tokens or default_output_tokens
    media = math.ceil(media_bytes / _CHARS_PER_TOKEN) + counted
    return math.ceil(chars / _CHARS_PER_TOKEN) + _FRAMING_TOKENS + cap + media, media


def _reported(usage: Usage | None) -> int | None:
    if usage is None:
        return None
    return usage.input_tokens + usage.output_tokens


class QuotaGate:
    """One call's use of its config's quota, across its attempts."""

    __slots__ = ("_deadline", "_permit", "_quota", "_request", "tokens_held", "waited_s")

    def __init__(self, quota: CallQuota, config: Config, request: ProviderRequest) -> None:
        self._quota = quota
        limit = config.retry.max_elapsed_s
        tokens, media = estimate_tokens(
            request,
            getattr(quota, "default_output_tokens", DEFAULT_OUTPUT_TOKENS),
            config.provider,
            # An Azure deployment's name says nothing of the model it serves.
            config.pricing_model or request.model or config.model,
        )
        self._request = QuotaRequest(
            provider=config.provider,
            model=request.model or config.model,
            key_id=key_id(config.api_key),
            tokens=tokens,
            deadline=None if limit is None else time.monotonic() + limit,
            media_tokens=media,
        )
        self.tokens_held = tokens
        self._permit: QuotaPermit | None = None
        self.waited_s = 0.0

    @classmethod
    def for_call(cls, config: Config, request: ProviderRequest) -> QuotaGate | None:
        """The gate of a call, or None when its config declares no quota."""
        quota = config.quota
        return None if quota is None else cls(quota, config, request)

    async def admit(self) -> None:
        """Wait until the quota has room for this attempt, then hold its worst case."""
        permit = await self._quota.acquire(self._request)
        self._permit = permit
        held = getattr(permit, "tokens_held", None)  # a quota may hold less (`fit_to_limit`)
        if isinstance(held, int) and not isinstance(held, bool):
            self.tokens_held = held
        waited = getattr(permit, "waited_s", 0.0)
        seconds = 0.0
        if isinstance(waited, (int, float)) and math.isfinite(waited) and waited > 0:
            seconds = float(waited)
            self.waited_s += seconds
        request = self._request
        record_quota_wait(request.provider, request.model, seconds)

    async def settle(self, usage: Usage | None) -> None:
        """The attempt answered: hold what the provider reported (the worst case if nothing)."""
        permit, self._permit = self._permit, None
        if permit is not None:
            await permit.settle(_reported(usage))

    async def failed(self, exc: BaseException) -> None:
        """The attempt failed: a 429 pauses every caller of the quota and used no tokens.

        Any other failure, and cancellation, keep the worst case counted (the provider may have
        done the work).
        """
        permit, self._permit = self._permit, None
        if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
            if permit is not None:
                # The worst case stays counted, shielded so that a second cancel cannot leave
                # the attempt in flight forever.
                await asyncio.shield(permit.settle(None))
            return
        if isinstance(exc, RateLimitError):
            pause = exc.retry_after_s if exc.retry_after_s else DEFAULT_PAUSE_S
            await self._quota.pause(self._request, pause)
            if permit is not None:
                await permit.settle(0)
            return
        if permit is not None:
            await permit.settle(None)

    def diagnostic(self) -> dict[str, float]:
        """What goes in ``Output.diagnostics.raw["quota"]``."""
        return {"waited_s": round(self.waited_s, 6), "tokens_held": self.tokens_held}
