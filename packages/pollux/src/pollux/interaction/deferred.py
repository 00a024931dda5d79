"""Deferred delivery values: the persisted job handle and normalized status snapshots."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Literal

from pollux.errors import ConfigurationError

from ._json import (
    check_fields,
    describe,
    get_float,
    get_int,
    get_opt_float,
    get_opt_str,
    get_str,
    is_finite_number,
    json_copy,
    require_mapping,
)

__all__ = [
    "BATCH_DISCOUNT",
    "BATCH_FULL_PRICE_CACHE_READS",
    "DEFERRED_STATUSES",
    "TERMINAL_STATUSES",
    "DeferredHandle",
    "DeferredSnapshot",
    "DeferredStatus",
]

DeferredStatus = Literal[
    "queued", "running", "cancelling", "completed", "partial", "failed", "cancelled", "expired"
]
"""The normalized lifecycle states of a deferred job."""

DEFERRED_STATUSES: tuple[str, ...] = (
    "queued",
    "running",
    "cancelling",
    "completed",
    "partial",
    "failed",
    "cancelled",
    "expired",
)
TERMINAL_STATUSES: frozenset[str] = frozenset(
    {"completed", "partial", "failed", "cancelled", "expired"}
)


BATCH_DISCOUNT: Mapping[str, Decimal] = MappingProxyType(
    {
        "openai": Decimal("0.5"),
        "anthropic": Decimal("0.5"),
        "gemini": Decimal("0.5"),
        "vertex": Decimal("0.5"),  # Vertex AI batch inference for Gemini
        # Azure OpenAI's global batch: 50% of the Global Standard price.
        "azure_openai": Decimal("0.5"),
    }
)
"""Batch price as a fraction of the standard price, by pollux provider, for models whose
genai-prices entry has no batch price variant (``processing=batch``; a model that has one is
priced by it): genai-prices lists none for older models (``claude-opus-4-1``,
``gemini-2.0-flash``) and none for a model borrowed from another provider's table (Azure's, for
most OpenAI models), while every batch API here bills half. Providers missing here are priced
at the standard tier (never below it). pollard's ledger (``pollard.adapters.pollux``) prices a
batch answer by this same table, so the two bills agree. Read-only: a bill is not changed by
editing it."""

BATCH_FULL_PRICE_CACHE_READS: frozenset[str] = frozenset({"gemini", "vertex"})
"""Providers whose `BATCH_DISCOUNT` leaves cache reads at their standard rate.

Google's batch and cache discounts do not stack: a batch answer's cache hits cost the cache-read
rate, its other tokens half price (genai-prices' batch variants of Gemini models keep the
cache-read rate for the same reason). OpenAI's, Anthropic's and Azure's batch discounts apply to
cache reads too. Both bills (pollux's figure and pollard's ledger) read this set."""


def _require_non_empty(value: str, name: str, what: str) -> None:
    if not value:
        raise ConfigurationError(
            f"{what}.{name} must be a non-empty string",
            hint=f"Pass the dict that {what}.to_dict() produced, unedited.",
        )


@dataclass(frozen=True, slots=True)
class DeferredHandle:
    """Serializable handle of a deferred job. Persist :meth:`to_dict` in full.

    Args:
        job_id: The provider's job id.
        provider: The provider that runs the job.
        model: The model the requests use.
        request_count: How many requests were submitted.
        submitted_at: Submission time (seconds since the epoch).
        schema_hash: Hash of the output schema at submission, to detect schema drift.
        provider_state: Provider-specific lifecycle data (request ids, owned files, ...).

    Example:
        >>> h = DeferredHandle("job-1", "openai", "gpt-5-nano", 2, 1700000000.0)
        >>> DeferredHandle.from_dict(h.to_dict()) == h
        True
    """

    job_id: str
    provider: str
    model: str
    request_count: int
    submitted_at: float
    schema_hash: str | None = None
    provider_state: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Validate field types so a handle always serializes."""
        for name in ("job_id", "provider", "model"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigurationError(
                    f"DeferredHandle.{name} must be a non-empty string, got {value!r}",
                    hint="Rebuild the handle with DeferredHandle.from_dict(saved).",
                )
        if (
            isinstance(self.request_count, bool)
            or not isinstance(self.request_count, int)
            or self.request_count < 0
        ):
            raise ConfigurationError(
                f"DeferredHandle.request_count must be an integer >= 0, got "
                f"{describe(self.request_count)}",
                hint="Rebuild the handle with DeferredHandle.from_dict(saved).",
            )
        if not is_finite_number(self.submitted_at):
            raise ConfigurationError(
                "DeferredHandle.submitted_at must be a finite number, got "
                f"{describe(self.submitted_at)}",
                hint="Rebuild the handle with DeferredHandle.from_dict(saved).",
            )
        if self.schema_hash is not None and not isinstance(self.schema_hash, str):
            raise ConfigurationError(
                "DeferredHandle.schema_hash must be a string or None",
                hint="Rebuild the handle with DeferredHandle.from_dict(saved).",
            )
        if self.provider_state is not None:
            if not isinstance(self.provider_state, Mapping):
                raise ConfigurationError(
                    "DeferredHandle.provider_state must be a dict or None",
                    hint="Rebuild the handle with DeferredHandle.from_dict(saved).",
                )
            object.__setattr__(
                self,
                "provider_state",
                json_copy(self.provider_state, what="DeferredHandle.provider_state"),
            )

    def to_dict(self) -> dict[str, Any]:
        """Serialize the handle for persistence (JSON-compatible)."""
        return {
            "job_id": self.job_id,
            "provider": self.provider,
            "model": self.model,
            "request_count": self.request_count,
            "submitted_at": self.submitted_at,
            "schema_hash": self.schema_hash,
            "provider_state": None
            if self.provider_state is None
            else json_copy(self.provider_state),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeferredHandle:
        """Rebuild a handle from :meth:`to_dict` output.

        Raises:
            ConfigurationError: A field is missing or has the wrong type.
        """
        data = require_mapping(data, "DeferredHandle")
        provider_state = data.get("provider_state")
        if provider_state is not None:
            provider_state = dict(require_mapping(provider_state, "DeferredHandle.provider_state"))
        values = {
            name: get_str(data, name, "DeferredHandle") for name in ("job_id", "provider", "model")
        }
        for name, value in values.items():
            _require_non_empty(value, name, "DeferredHandle")
        return cls(
            job_id=values["job_id"],
            provider=values["provider"],
            model=values["model"],
            request_count=get_int(data, "request_count", "DeferredHandle"),
            submitted_at=get_float(data, "submitted_at", "DeferredHandle"),
            schema_hash=get_opt_str(data, "schema_hash", "DeferredHandle"),
            provider_state=provider_state,
        )


@dataclass(frozen=True, slots=True)
class DeferredSnapshot:
    """Normalized snapshot of a deferred job's lifecycle.

    Args:
        job_id: The provider's job id.
        provider: The provider.
        model: The model.
        status: ``queued``, ``running``, ``cancelling``, ``completed``, ``partial``,
            ``failed``, ``cancelled`` or ``expired``.
        provider_status: The provider's raw status string (for logs, not for branching).
        request_count: Requests in the job.
        succeeded: Requests that succeeded so far.
        failed: Requests that failed so far.
        pending: Requests not finished yet.
        submitted_at: Submission time (seconds since the epoch).
        completed_at: When the job reached a terminal state, if it has.
        expires_at: When the provider expires the job, if known.
    """

    job_id: str
    provider: str
    model: str
    status: DeferredStatus
    provider_status: str
    request_count: int
    succeeded: int
    failed: int
    pending: int
    submitted_at: float
    completed_at: float | None = None
    expires_at: float | None = None

    def __post_init__(self) -> None:
        """Validate the status and the field types, so a snapshot always serializes."""
        if self.status not in DEFERRED_STATUSES:
            raise ConfigurationError(
                f"Unknown deferred status: {describe(self.status)}",
                hint="Use one of: " + ", ".join(DEFERRED_STATUSES) + ".",
            )
        check_fields(
            self,
            {
                "job_id": "str",
                "provider": "str",
                "model": "str",
                "provider_status": "str",
                "request_count": "count",
                "succeeded": "count",
                "failed": "count",
                "pending": "count",
                "submitted_at": "number",
                "completed_at": "number?",
                "expires_at": "number?",
            },
            hint="Counts are whole numbers >= 0 and times are Unix timestamps in seconds.",
        )

    @property
    def is_terminal(self) -> bool:
        """True when the job is ready to collect or permanently done."""
        return self.status in TERMINAL_STATUSES

    def to_dict(self) -> dict[str, Any]:
        """Serialize the snapshot (JSON-compatible)."""
        return {
            "job_id": self.job_id,
            "provider": self.provider,
            "model": self.model,
            "status": self.status,
            "provider_status": self.provider_status,
            "request_count": self.request_count,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "pending": self.pending,
            "submitted_at": self.submitted_at,
            "completed_at": self.completed_at,
            "expires_at": self.expires_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeferredSnapshot:
        """Rebuild a snapshot from :meth:`to_dict` output.

        Raises:
            ConfigurationError: A field is missing or has the wrong type.
        """
        data = require_mapping(data, "DeferredSnapshot")
        what = "DeferredSnapshot"
        status = get_str(data, "status", what)
        return cls(
            job_id=get_str(data, "job_id", what),
            provider=get_str(data, "provider", what),
            model=get_str(data, "model", what),
            status=status,  # type: ignore[arg-type]  # validated in __post_init__
            provider_status=get_str(data, "provider_status", what),
            request_count=get_int(data, "request_count", what),
            succeeded=get_int(data, "succeeded", what),
            failed=get_int(data, "failed", what),
            pending=get_int(data, "pending", what),
            submitted_at=get_float(data, "submitted_at", what),
            completed_at=get_opt_float(data, "completed_at", what),
            expires_at=get_opt_float(data, "expires_at", what),
        )
