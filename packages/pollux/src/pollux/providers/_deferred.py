"""The optional deferred-delivery side of the provider boundary.

A provider that runs jobs on a provider-side timeline (OpenAI's Batch API, the mock's in-memory
timeline) declares ``Capabilities.deferred_delivery`` and implements :class:`DeferredBackend`
next to :class:`~pollux.providers.base.Provider`. The engine (``pollux._engine.deferred``) owns
everything provider-neutral: capability gating and validation before any I/O, the stable request
ids (:func:`request_ids`), the handle format, the schema fingerprint, ordered collection and
extraction into Outputs. A backend owns the wire: submission, status normalization to a
:class:`~pollux.interaction.deferred.DeferredSnapshot`, reading results back as
:class:`DeferredItem` values, cancellation and the cleanup of what it uploaded.

A backend's ``provider_state`` is JSON data that goes into the handle; the engine adds its own
``"format"`` and ``"backend"`` keys, so backends must not use those names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pollux.errors import APIError
    from pollux.interaction.deferred import DeferredHandle, DeferredSnapshot
    from pollux.providers.base import ProviderRequest, ProviderResponse

__all__ = [
    "REQUEST_ID_PREFIX",
    "DeferredBackend",
    "DeferredItem",
    "DeferredItemStatus",
    "DeferredJob",
    "DeferredResults",
    "request_ids",
]

#: Every deferred request id is this prefix plus the zero-padded prompt index.
REQUEST_ID_PREFIX = "pollux-"

DeferredItemStatus = Literal["succeeded", "failed", "cancelled", "expired"]
"""The terminal state of one request in a deferred job."""


def request_ids(count: int) -> list[str]:
    """The stable request ids of a job with ``count`` requests, in prompt order.

    Example:
        >>> request_ids(2)
        ['pollux-000000', 'pollux-000001']
    """
    return [f"{REQUEST_ID_PREFIX}{index:06d}" for index in range(count)]


@dataclass(frozen=True, slots=True)
class DeferredJob:
    """What a backend reports after submitting a job.

    Attributes:
        job_id: The provider's job id.
        model: The model the requests use.
        submitted_at: Submission time in seconds since the epoch (the provider's clock when
            it reports one).
        provider_state: JSON data the backend needs later (owned file ids, ...).
    """

    job_id: str
    model: str
    submitted_at: float
    provider_state: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DeferredItem:
    """The outcome of one request of a terminal job.

    Attributes:
        request_id: The request id (see :func:`request_ids`).
        status: ``succeeded``, ``failed``, ``cancelled`` or ``expired``.
        response: The neutral response of a succeeded request.
        error: Why the request did not succeed.
        provider_status: The provider's raw per-item status (an HTTP status code or an error
            code), for logs.
    """

    request_id: str
    status: DeferredItemStatus
    response: ProviderResponse | None = None
    error: APIError | None = None
    provider_status: str | None = None


@dataclass(frozen=True, slots=True)
class DeferredResults:
    """A job's snapshot and, once it is terminal, its per-request outcomes.

    ``items`` is ``None`` while the job is still active. For a terminal job it holds every
    request the provider reported (the engine fills in any it did not).
    """

    snapshot: DeferredSnapshot
    items: tuple[DeferredItem, ...] | None = None


@runtime_checkable
class DeferredBackend(Protocol):
    """What the engine needs from a provider with ``deferred_delivery``.

    Every method may raise :class:`~pollux.errors.APIError`; the engine retries the retryable
    ones with the config's policy. ``submit_deferred`` must leave nothing behind when it fails
    (it deletes what it uploaded before raising), so a retry starts clean.
    """

    async def submit_deferred(
        self, requests: Sequence[ProviderRequest], request_ids: Sequence[str]
    ) -> DeferredJob:
        """Submit validated requests (one per id, in order) as one provider job."""
        ...

    async def inspect_deferred(self, handle: DeferredHandle) -> DeferredSnapshot:
        """The job's normalized status now; release owned uploads once it is terminal."""
        ...

    async def collect_deferred(self, handle: DeferredHandle) -> DeferredResults:
        """The snapshot, plus the per-request outcomes when the job is terminal."""
        ...

    async def cancel_deferred(self, handle: DeferredHandle) -> None:
        """Ask the provider to cancel the job (a job that already ended is left alone)."""
        ...
