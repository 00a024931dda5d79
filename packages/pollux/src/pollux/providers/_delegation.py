"""What the SDK providers share around their batch backends and readiness probes.

OpenAI, Anthropic and Gemini each keep their batch wire code in a ``deferred`` module (an object
that implements :class:`~pollux.providers._deferred.DeferredBackend`) and probe readiness by
retrieving the configured model. :class:`BatchDelegation` forwards the provider's deferred methods
to that object, and :func:`model_readiness` turns one model-retrieve probe into a
:class:`~pollux.providers.base.ProviderReadiness`, so each provider states only what differs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from pollux.providers.base import ProviderReadiness

if TYPE_CHECKING:
    from pollux.errors import PolluxError
    from pollux.interaction.deferred import DeferredHandle, DeferredSnapshot
    from pollux.providers._deferred import DeferredBackend, DeferredJob, DeferredResults
    from pollux.providers.base import ProviderRequest

__all__ = ["BatchDelegation", "model_readiness"]


class BatchDelegation:
    """Mixin: the deferred-delivery methods, forwarded to ``self._batches``.

    The provider sets ``_batches`` in ``__init__`` to its batch backend (the provider's
    ``deferred`` module documents the wire); list this class before ``ProviderBase``.
    """

    _batches: DeferredBackend

    async def submit_deferred(
        self, requests: Sequence[ProviderRequest], request_ids: Sequence[str]
    ) -> DeferredJob:
        """Submit the requests as one provider batch job (see the provider's ``deferred``)."""
        return await self._batches.submit_deferred(requests, request_ids)

    async def inspect_deferred(self, handle: DeferredHandle) -> DeferredSnapshot:
        """The job's normalized status."""
        return await self._batches.inspect_deferred(handle)

    async def collect_deferred(self, handle: DeferredHandle) -> DeferredResults:
        """The job's status and, once it ended, every request's outcome."""
        return await self._batches.collect_deferred(handle)

    async def cancel_deferred(self, handle: DeferredHandle) -> None:
        """Ask the provider to cancel the job."""
        await self._batches.cancel_deferred(handle)


async def model_readiness(
    target: str | None,
    probe: Callable[[str | None], Awaitable[object]],
    wrap: Callable[..., PolluxError],
    *,
    provider: str,
) -> ProviderReadiness:
    """Ready when ``probe(target)`` (a model retrieve) answers; else the wrapped error.

    Args:
        target: The model to ask about.
        probe: Retrieves the model; building the SDK client happens inside it, so a missing
            SDK or key reports not ready instead of raising.
        wrap: The provider's ``wrap_*_error``; called with ``phase="metadata"``.
        provider: The provider name reported.
    """
    try:
        await probe(target)
    except Exception as exc:
        error = wrap(exc, phase="metadata")
        return ProviderReadiness(
            ready=False,
            provider=provider,
            status_code=getattr(error, "status_code", None),
            message=f"{error} ({error.hint})" if error.hint else str(error),
            model=target,
        )
    return ProviderReadiness(
        ready=True,
        provider=provider,
        status_code=200,
        message=f"model {target!r} is available",
        model=target,
        model_verified=True,
    )
