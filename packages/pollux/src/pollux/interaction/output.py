"""Output and its facets (Usage, Metrics, Diagnostics), and OutputCollection.

``Output.to_jsonable()`` / ``Output.from_jsonable()`` round-trip faithfully: replay and
persistence depend on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, cast

from pollux._scrub import scrub
from pollux.errors import APIError, ConfigurationError, PolluxError

from ._json import (
    describe,
    get_bool,
    get_float,
    get_int,
    get_list,
    get_opt_int,
    get_opt_str,
    get_str,
    is_finite_number,
    json_copy,
    jsonable,
    require_mapping,
)
from .continuation import Continuation
from .tools import ToolCall

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "CacheMode",
    "CollectionStatus",
    "CompletionStatus",
    "Diagnostics",
    "Metrics",
    "Output",
    "OutputCollection",
    "Usage",
    "completion_status_for",
    "error_output",
    "error_payload",
]

CompletionStatus = Literal["clean", "truncated", "cutoff", "error"]
"""How an interaction ended: ``"clean"``; ``"truncated"`` (output-token limit or context
overflow); ``"cutoff"`` (stopped by a safety or content filter); ``"error"`` (it failed)."""

CacheMode = Literal["persistent", "implicit", "none"]
"""Which caching path served an interaction."""

CollectionStatus = Literal["ok", "partial", "error"]
"""``"ok"``: no call failed; ``"partial"``: some failed; ``"error"``: every call failed.

A clean but empty answer is not a failure (the status comes from execution failures).
"""

_COMPLETION_STATUSES = ("clean", "truncated", "cutoff", "error")
_CACHE_MODES = ("persistent", "implicit", "none")
_TRUNCATED_REASONS = frozenset(
    {
        "max_tokens",
        "length",
        "max_output_tokens",
        "max_completion_tokens",
        "model_length",
        # Anthropic: the context window filled up, or a long server-tool turn paused (the answer
        # is incomplete either way; send it back to continue).
        "model_context_window_exceeded",
        "pause_turn",
    }
)
_CUTOFF_REASONS = frozenset(
    {
        "content_filter",
        "safety",
        "recitation",
        "prohibited_content",
        "blocklist",
        "spii",
        "refusal",
        "image_safety",
    }
)


def completion_status_for(
    finish_reason: str | None, *, error_category: str | None = None
) -> CompletionStatus:
    """Map a normalized finish reason (and error category) to a :data:`CompletionStatus`.

    A ``context_overflow`` error is ``"truncated"``; any other error category is
    ``"error"``; ``max_tokens``/``length``/``max_output_tokens`` are ``"truncated"``; safety
    and content-filter stops are ``"cutoff"``; anything else is ``"clean"``. Finish reasons
    are compared case-insensitively.
    """
    if error_category is not None:
        return "truncated" if error_category == "context_overflow" else "error"
    reason = (finish_reason or "").lower()
    if reason in _TRUNCATED_REASONS:
        return "truncated"
    if reason in _CUTOFF_REASONS:
        return "cutoff"
    return "clean"


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one interaction (or a collection's sum): one contract for every provider.

    Every provider's report is mapped onto these fields, so a bill is computed the same way
    everywhere. ``input_tokens`` is the whole prompt; the cache fields are *parts* of it, so the
    uncached rest is :attr:`uncached_input_tokens`. An optional count that is ``None`` was not
    reported by the provider: it is unknown, never zero, and is never priced as zero.

    ====================== =========================================================================
    field                  meaning (what each provider reports it from)
    ====================== =========================================================================
    input_tokens           every prompt token, cached or not (Anthropic: ``input_tokens`` plus
                           its cache reads and writes; others: the prompt count)
    output_tokens          generated tokens, reasoning included
    reasoning_tokens       the reasoning part of ``output_tokens``
    cached_tokens          prompt tokens read from a cache (priced at the cache-read rate)
    cache_write_tokens     prompt tokens written to a cache, every TTL class together
    cache_write_5m_tokens  the part of ``cache_write_tokens`` written with a 5-minute TTL
    cache_write_1h_tokens  the part written with a 1-hour TTL (Anthropic prices it higher)
    provider_cost_usd      the provider's own price of the call (OpenRouter ``usage.cost``); it
                           wins over a computed price, which pollux and pollard keep beside it
    reported               False when the provider reported no usage at all (the counts are then
                           zeros that mean "unknown", and pollard marks the call ``usage_missing``)
    ====================== =========================================================================

    Args:
        input_tokens: Prompt tokens, including cached ones.
        output_tokens: Generated tokens, including reasoning tokens.
        total_tokens: Input plus output tokens.
        reasoning_tokens: Reasoning tokens, when the provider reports them.
        cached_tokens: Input tokens served from a cache, when the provider reports them.
        cache_write_tokens: Input tokens written to a cache by this call (Anthropic charges a
            premium for them), when the provider reports them. Like ``cached_tokens`` they are
            part of ``input_tokens``. The total of the TTL classes below.
        cache_write_5m_tokens: The 5-minute-TTL part of ``cache_write_tokens``, when reported.
        cache_write_1h_tokens: The 1-hour-TTL part of ``cache_write_tokens``, when reported.
        provider_cost_usd: The provider's own dollar price of the call, when it reports one.
        reported: False when the provider reported no usage for the call.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    cache_write_5m_tokens: int | None = None
    cache_write_1h_tokens: int | None = None
    provider_cost_usd: Decimal | None = None
    reported: bool = True

    def __post_init__(self) -> None:
        """Reject negative or non-integer counts, and a TTL split larger than its total."""
        for name in ("input_tokens", "output_tokens", "total_tokens"):
            _check_count(name, getattr(self, name), optional=False)
        for name in _OPTIONAL_COUNTS:
            _check_count(name, getattr(self, name), optional=True)
        short, long = self.cache_write_5m_tokens, self.cache_write_1h_tokens
        if (short is not None or long is not None) and self.cache_write_tokens is None:
            # The total is what older readers use: derive it from the split.
            object.__setattr__(self, "cache_write_tokens", (short or 0) + (long or 0))
        elif (short or 0) + (long or 0) > (self.cache_write_tokens or 0):
            raise ConfigurationError(
                f"Usage cache write split ({short} + {long}) exceeds cache_write_tokens "
                f"({self.cache_write_tokens})",
                hint="cache_write_5m_tokens and cache_write_1h_tokens are parts of "
                "cache_write_tokens.",
            )
        cost: object = self.provider_cost_usd
        if cost is not None:
            if not isinstance(cost, (Decimal, int, float, str)) or isinstance(cost, bool):
                raise ConfigurationError(
                    f"Usage.provider_cost_usd must be a number, got {describe(cost)}",
                    hint="Pass the provider's cost in US dollars, for example Decimal('0.0012').",
                )
            try:
                exact = Decimal(str(cost))
            except ArithmeticError:
                exact = Decimal("NaN")
            if not exact.is_finite() or exact < 0:
                raise ConfigurationError(
                    f"Usage.provider_cost_usd must be a finite amount >= 0, got {cost!r}",
                    hint="Pass the provider's cost in US dollars, for example Decimal('0.0012').",
                )
            object.__setattr__(self, "provider_cost_usd", exact)
        if not isinstance(self.reported, bool):
            raise ConfigurationError(
                f"Usage.reported must be True or False, got {describe(self.reported)}",
                hint="Leave reported=True unless the provider sent no usage.",
            )

    @property
    def uncached_input_tokens(self) -> int:
        """Prompt tokens neither read from nor written to a cache (priced at the input rate)."""
        return max(
            self.input_tokens - (self.cached_tokens or 0) - (self.cache_write_tokens or 0), 0
        )

    def to_jsonable(self) -> dict[str, Any]:
        """Serialize to a JSON-compatible dict (unreported optional counts omitted)."""
        payload: dict[str, Any] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }
        for name in _OPTIONAL_COUNTS:
            value = getattr(self, name)
            if value is not None:
                payload[name] = value
        if self.provider_cost_usd is not None:
            # Text, so the provider's exact figure survives JSON.
            payload["provider_cost_usd"] = str(self.provider_cost_usd)
        if not self.reported:
            payload["reported"] = False
        return payload

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        """Build usage from a flat dict of counts; missing counts are 0 (or ``None``).

        ``total_tokens`` defaults to ``input_tokens + output_tokens``.

        Raises:
            ConfigurationError: A count is not a non-negative integer.
        """
        data = require_mapping(data, "Usage")
        input_tokens = get_int(data, "input_tokens", "Usage", default=0)
        output_tokens = get_int(data, "output_tokens", "Usage", default=0)
        return cls(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=get_int(
                data, "total_tokens", "Usage", default=input_tokens + output_tokens
            ),
            **{name: get_opt_int(data, name, "Usage") for name in _OPTIONAL_COUNTS},
            provider_cost_usd=data.get("provider_cost_usd"),
            reported=get_bool(data, "reported", "Usage", default=True),
        )

    from_jsonable = from_dict


_OPTIONAL_COUNTS = (
    "reasoning_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
)


def sum_usage(usages: Sequence[Usage]) -> Usage:
    """Sum usages field by field; an optional count stays ``None`` when no usage reports it."""

    def total(name: str) -> int | None:
        values = [getattr(u, name) for u in usages if getattr(u, name) is not None]
        return sum(values) if values else None

    costs = [u.provider_cost_usd for u in usages if u.provider_cost_usd is not None]
    return Usage(
        input_tokens=sum(u.input_tokens for u in usages),
        output_tokens=sum(u.output_tokens for u in usages),
        total_tokens=sum(u.total_tokens for u in usages),
        **{name: total(name) for name in _OPTIONAL_COUNTS},
        # A partial sum of provider costs would read as the whole bill: only when all report it.
        provider_cost_usd=sum(costs, Decimal(0)) if costs and len(costs) == len(usages) else None,
        reported=all(u.reported for u in usages),
    )


def _check_count(name: str, value: object, *, optional: bool) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(
            f"Usage.{name} must be a non-negative integer, got {value!r}",
            hint="Token counts are whole numbers >= 0.",
        )


@dataclass(frozen=True, slots=True)
class Metrics:
    """How an interaction ran.

    Args:
        duration_s: Wall-clock duration in seconds.
        n_calls: Provider calls made (retries excluded).
        cache_used: A cache served part of the input.
        cache_mode: ``"persistent"``, ``"implicit"`` or ``"none"``.
        cache_hit: The cache was found rather than created.
        finish_reason: The provider's normalized finish reason.
        completion_status: ``"clean"``, ``"truncated"``, ``"cutoff"`` or ``"error"``
            (see :func:`completion_status_for`).
        cache_hit_ratio: The share of prompt tokens read from a cache (``cached_tokens /
            input_tokens``, 0.0 to 1.0); ``None`` when the provider reported no usage.
        cost_usd: What the call cost in US dollars: the provider's own figure when it reports
            one (OpenRouter), else the list price from genai-prices (an Azure OpenAI call: of
            the model the response names, else ``Config.pricing_model``); ``None`` when
            unpriced (genai-prices not installed, or a model it does not know).
        cache_savings_usd: Dollars the cache saved against the same call on the same model with
            no cache (negative while a cache write's premium is not yet paid back); ``None``
            when unpriced.
    """

    duration_s: float = 0.0
    n_calls: int = 1
    cache_used: bool = False
    cache_mode: CacheMode = "none"
    cache_hit: bool = False
    finish_reason: str | None = None
    completion_status: CompletionStatus = "clean"
    cache_hit_ratio: float | None = None
    cost_usd: float | None = None
    cache_savings_usd: float | None = None

    def __post_init__(self) -> None:
        """Validate every field, so any Metrics survives a JSON round trip."""
        for name in ("cache_hit_ratio", "cost_usd", "cache_savings_usd"):
            value = getattr(self, name)
            if value is not None and not is_finite_number(value):
                raise ConfigurationError(
                    f"Metrics.{name} must be a finite number or None, got {describe(value)}",
                    hint=f"Pass {name}=None when it is unknown.",
                )
        duration = self.duration_s
        if not is_finite_number(duration):
            raise ConfigurationError(
                f"Metrics.duration_s must be a finite number, got {describe(duration)}",
                hint="Pass the duration in seconds, for example duration_s=1.5.",
            )
        if isinstance(self.n_calls, bool) or not isinstance(self.n_calls, int) or self.n_calls < 0:
            raise ConfigurationError(
                f"Metrics.n_calls must be an integer >= 0, got {describe(self.n_calls)}",
                hint="Count the provider calls made, for example n_calls=1.",
            )
        for name in ("cache_used", "cache_hit"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(
                    f"Metrics.{name} must be True or False, got {describe(getattr(self, name))}",
                    hint=f"Pass {name}=True or {name}=False.",
                )
        if self.finish_reason is not None and not isinstance(self.finish_reason, str):
            raise ConfigurationError(
                f"Metrics.finish_reason must be a string or None, got "
                f"{describe(self.finish_reason)}",
                hint="Pass the provider's finish reason as text, for example 'stop'.",
            )
        if self.completion_status not in _COMPLETION_STATUSES:
            raise ConfigurationError(
                f"Unknown completion_status: {self.completion_status!r}",
                hint="Use 'clean', 'truncated', 'cutoff' or 'error'.",
            )
        if self.cache_mode not in _CACHE_MODES:
            raise ConfigurationError(
                f"Unknown cache_mode: {self.cache_mode!r}",
                hint="Use 'persistent', 'implicit' or 'none'.",
            )

    def to_jsonable(self) -> dict[str, Any]:
        """Serialize to a JSON-compatible dict (every field; unknown cost figures omitted)."""
        return {
            "duration_s": self.duration_s,
            "n_calls": self.n_calls,
            "cache_used": self.cache_used,
            "cache_mode": self.cache_mode,
            "cache_hit": self.cache_hit,
            "finish_reason": self.finish_reason,
            "completion_status": self.completion_status,
            # Omitted when unknown, so outputs without prices serialize as they always did.
            **{
                name: value
                for name in ("cache_hit_ratio", "cost_usd", "cache_savings_usd")
                if (value := getattr(self, name)) is not None
            },
        }

    @classmethod
    def from_jsonable(cls, data: Mapping[str, Any]) -> Metrics:
        """Rebuild metrics from :meth:`to_jsonable` output; missing fields take defaults.

        Raises:
            ConfigurationError: A field has the wrong type or value.
        """
        data = require_mapping(data, "Metrics")
        return cls(
            duration_s=get_float(data, "duration_s", "Metrics", default=0.0),
            n_calls=get_int(data, "n_calls", "Metrics", default=1),
            cache_used=get_bool(data, "cache_used", "Metrics", default=False),
            cache_mode=cast(CacheMode, get_str(data, "cache_mode", "Metrics", default="none")),
            cache_hit=get_bool(data, "cache_hit", "Metrics", default=False),
            finish_reason=get_opt_str(data, "finish_reason", "Metrics"),
            completion_status=cast(
                CompletionStatus,
                get_str(data, "completion_status", "Metrics", default="clean"),
            ),
            cache_hit_ratio=_opt_float(data, "cache_hit_ratio"),
            cost_usd=_opt_float(data, "cost_usd"),
            cache_savings_usd=_opt_float(data, "cache_savings_usd"),
        )


def _opt_float(data: Mapping[str, Any], key: str) -> float | None:
    return None if data.get(key) is None else get_float(data, key, "Metrics")


@dataclass(frozen=True, slots=True)
class Diagnostics:
    """Raw, provider-shaped detail for debugging and provenance.

    ``raw["response"]`` holds the normalized provider response; ``raw["error"]`` the error of
    a failed item (see :attr:`error`); ``raw["deferred"]`` deferred provenance.
    """

    raw: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Validate the payload type."""
        raw: object = self.raw
        if not isinstance(raw, Mapping):
            raise ConfigurationError(
                f"Diagnostics.raw must be a dict, got {type(raw).__name__}",
                hint="Pass a dict of JSON-compatible values.",
            )
        if not isinstance(raw, dict):
            object.__setattr__(self, "raw", dict(raw))

    @property
    def error(self) -> dict[str, Any] | None:
        """The error of a failed interaction (type, message, hint, ...), or ``None``."""
        value = self.raw.get("error")
        return value if isinstance(value, dict) else None

    def to_jsonable(self) -> dict[str, Any]:
        """Serialize ``raw`` to JSON-compatible data (a copy)."""
        return cast(dict[str, Any], jsonable(self.raw))

    @classmethod
    def from_jsonable(cls, data: Mapping[str, Any]) -> Diagnostics:
        """Rebuild diagnostics from :meth:`to_jsonable` output."""
        data = require_mapping(data, "Diagnostics")
        return cls(raw=json_copy(data, what="Diagnostics"))


def _structured_jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return dump(mode="json")
    return jsonable(value)


@dataclass(frozen=True, slots=True)
class Output:
    """The completed result of one model interaction, as named facets.

    Args:
        text: The model's text answer.
        structured: The structured answer (a pydantic instance or JSON data) when an output
            schema was requested.
        reasoning: The model's reasoning summary, when the provider returns one.
        tool_calls: Tools the model asked to call.
        continuation: State to continue the conversation (``Input(continuation=...)``).
        usage: Token usage.
        metrics: Duration, cache use and completion status.
        diagnostics: Raw provider detail.

    Example:
        >>> out = Output(text="42")
        >>> Output.from_jsonable(out.to_jsonable()) == out
        True
    """

    text: str = ""
    structured: Any = None
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    continuation: Continuation | None = None
    usage: Usage = field(default_factory=Usage)
    metrics: Metrics = field(default_factory=Metrics)
    diagnostics: Diagnostics = field(default_factory=Diagnostics)

    def __post_init__(self) -> None:
        """Freeze tool calls to a tuple and check each facet's type.

        The checks are those of :meth:`from_jsonable`, so every Output that can be built can
        also be saved and restored.
        """
        calls: object = self.tool_calls
        if not isinstance(calls, tuple):
            if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Iterable):
                raise ConfigurationError(
                    f"Output.tool_calls must be a sequence of ToolCall, got {describe(calls)}",
                    hint="Pass a tuple of ToolCall values, or () for none.",
                )
            object.__setattr__(self, "tool_calls", tuple(calls))
        if not isinstance(self.text, str):
            raise ConfigurationError(
                f"Output.text must be a string, got {describe(self.text)}",
                hint="Pass text='' when the model produced no text.",
            )
        if self.reasoning is not None and not isinstance(self.reasoning, str):
            raise ConfigurationError(
                f"Output.reasoning must be a string or None, got {describe(self.reasoning)}",
                hint="Pass the reasoning summary as text, or None.",
            )
        for call in self.tool_calls:
            if not isinstance(call, ToolCall):
                raise ConfigurationError(
                    f"Output.tool_calls must contain ToolCall values, got {describe(call)}",
                    hint="Build tool calls with ToolCall.from_text(...).",
                )
        facets: tuple[tuple[str, object, type | tuple[type, ...]], ...] = (
            ("continuation", self.continuation, (Continuation, type(None))),
            ("usage", self.usage, Usage),
            ("metrics", self.metrics, Metrics),
            ("diagnostics", self.diagnostics, Diagnostics),
        )
        for name, value, expected in facets:
            if not isinstance(value, expected):
                raise ConfigurationError(
                    f"Output.{name} has the wrong type: {type(value).__name__}",
                    hint=f"Leave {name} at its default or pass a pollux value of that facet.",
                )

    @property
    def failed(self) -> bool:
        """True when the interaction failed (``metrics.completion_status == "error"``)."""
        return self.metrics.completion_status == "error"

    @property
    def has_answer(self) -> bool:
        """True when the output carries text, a structured value or tool calls."""
        return bool(self.text.strip()) or self.structured is not None or bool(self.tool_calls)

    def to_jsonable(self) -> dict[str, Any]:
        """Serialize to a JSON-compatible dict (empty optional facets omitted)."""
        payload: dict[str, Any] = {"text": self.text}
        if self.structured is not None:
            payload["structured"] = _structured_jsonable(self.structured)
        if self.reasoning is not None:
            payload["reasoning"] = self.reasoning
        if self.tool_calls:
            payload["tool_calls"] = [call.to_jsonable() for call in self.tool_calls]
        if self.continuation is not None:
            payload["continuation"] = self.continuation.to_jsonable()
        payload["usage"] = self.usage.to_jsonable()
        payload["metrics"] = self.metrics.to_jsonable()
        diagnostics = self.diagnostics.to_jsonable()
        if diagnostics:
            payload["diagnostics"] = diagnostics
        return payload

    @classmethod
    def from_jsonable(
        cls,
        data: Mapping[str, Any],
        *,
        response_schema: type[BaseModel] | None = None,
    ) -> Output:
        """Rebuild an output from :meth:`to_jsonable` output.

        Args:
            data: The serialized output.
            response_schema: A pydantic model to validate ``structured`` into; without it the
                structured value stays JSON data.

        Raises:
            ConfigurationError: The data is not a serialized output, or ``structured`` does
                not validate against ``response_schema``.
        """
        data = require_mapping(data, "Output")
        structured = data.get("structured")
        if structured is not None:
            structured = json_copy(structured, what="Output.structured")
            if response_schema is not None:
                structured = _validate_structured(response_schema, structured)
        reasoning = get_opt_str(data, "reasoning", "Output")
        raw_continuation = data.get("continuation")
        return cls(
            text=get_str(data, "text", "Output", default=""),
            structured=structured,
            reasoning=reasoning,
            tool_calls=tuple(
                ToolCall.from_jsonable(item) for item in get_list(data, "tool_calls", "Output")
            ),
            continuation=None
            if raw_continuation is None
            else Continuation.from_jsonable(raw_continuation),
            usage=Usage.from_dict(data.get("usage") or {}),
            metrics=Metrics.from_jsonable(data.get("metrics") or {}),
            diagnostics=Diagnostics.from_jsonable(data.get("diagnostics") or {}),
        )


def _validate_structured(schema: type[BaseModel], value: Any) -> Any:
    try:
        return schema.model_validate(value)
    except Exception as exc:
        raise ConfigurationError(
            f"Stored structured output does not match {schema.__name__}: {exc}",
            hint="Pass the schema the output was produced with, or omit response_schema.",
        ) from exc


def error_payload(error: BaseException) -> dict[str, Any]:
    """Describe an error as JSON-compatible data for ``Diagnostics.raw["error"]``."""
    # Scrubbed here too: a non-pollux exception's text has not been through PolluxError.
    payload: dict[str, Any] = {"type": type(error).__name__, "message": scrub(str(error))}
    if isinstance(error, PolluxError) and error.hint is not None:
        payload["hint"] = scrub(error.hint)
    if isinstance(error, APIError):
        for name in (
            "provider",
            "phase",
            "call_idx",
            "status_code",
            "retryable",
            "retry_after_s",
            "error_category",
        ):
            value = getattr(error, name)
            if value is not None:
                payload[name] = value
    return payload


def error_output(
    error: BaseException,
    *,
    duration_s: float = 0.0,
    n_calls: int = 1,
    extra: Mapping[str, Any] | None = None,
) -> Output:
    """Build the Output of a failed interaction (for partial results).

    Its text is empty, ``metrics.completion_status`` is ``"error"`` (or ``"truncated"`` for a
    context overflow) and ``diagnostics.raw["error"]`` describes the error.

    Args:
        error: The exception that ended the interaction.
        duration_s: How long the interaction ran.
        n_calls: Provider calls made.
        extra: Further diagnostics entries (for example ``{"deferred": {...}}``).
    """
    category = getattr(error, "error_category", None)
    status = completion_status_for(None, error_category=category or "error")
    raw: dict[str, Any] = dict(extra or {})
    raw["error"] = error_payload(error)
    return Output(
        metrics=Metrics(duration_s=duration_s, n_calls=n_calls, completion_status=status),
        diagnostics=Diagnostics(raw=raw),
    )


def _tuple_of(value: object, name: str) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ConfigurationError(
            f"OutputCollection.{name} must be a sequence, got {describe(value)}",
            hint=f"Pass a list or tuple for {name}.",
        )
    return tuple(value)


@dataclass(frozen=True, slots=True)
class OutputCollection:
    """The outputs of a multi-call source pattern (``run_many``, ``collect_deferred``).

    Outputs keep input order. A failed interaction does not discard the others: it appears
    as an Output whose ``metrics.completion_status`` is ``"error"`` and whose
    ``diagnostics.error`` holds the error.

    Args:
        outputs: One output per prompt, in order.
        prompt_indexes: For each output, the index of its prompt.
        source_indexes: For each output, the index of its source (broadcast patterns).

    Example:
        >>> OutputCollection((Output(text="a"), Output(text=""))).status
        'ok'
    """

    outputs: tuple[Output, ...] = ()
    prompt_indexes: tuple[int, ...] | None = None
    source_indexes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        """Freeze the sequences to tuples and check they line up with the outputs."""
        outputs = _tuple_of(self.outputs, "outputs")
        for output in outputs:
            if not isinstance(output, Output):
                raise ConfigurationError(
                    f"OutputCollection.outputs must contain Output values, "
                    f"got {type(output).__name__}",
                    hint="Build the collection from Output objects (Output.from_jsonable for "
                    "stored ones).",
                )
        object.__setattr__(self, "outputs", outputs)
        for name in ("prompt_indexes", "source_indexes"):
            value = getattr(self, name)
            if value is None:
                continue
            indexes = _tuple_of(value, name)
            for index in indexes:
                if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                    raise ConfigurationError(
                        f"OutputCollection.{name} must hold integers >= 0, got {describe(index)}",
                        hint=f"Give each output's position in the input as its {name} entry.",
                    )
            if len(indexes) != len(self.outputs):
                raise ConfigurationError(
                    f"{name} has {len(indexes)} entries for {len(self.outputs)} outputs",
                    hint=f"Give exactly one {name} entry per output.",
                )
            object.__setattr__(self, name, indexes)

    @property
    def answers(self) -> list[str]:
        """Per-interaction text, in input order."""
        return [output.text for output in self.outputs]

    @property
    def structured(self) -> list[Any]:
        """Per-interaction structured values, in input order."""
        return [output.structured for output in self.outputs]

    @property
    def usage(self) -> Usage:
        """Token usage summed over the outputs (optional counts stay ``None`` if unreported)."""
        return sum_usage([o.usage for o in self.outputs])

    @property
    def cache_hit_ratio(self) -> float | None:
        """Prompt tokens read from a cache over all prompt tokens, across the outputs.

        ``None`` when no output reported usage. :meth:`cache_hit_ratio_after_first` leaves the
        first output out (the call that wrote the cache the others read).
        """
        return _hit_ratio(self.outputs)

    def cache_hit_ratio_after_first(self) -> float | None:
        """:attr:`cache_hit_ratio` over every output but the first (the one that wrote it)."""
        return _hit_ratio(self.outputs[1:])

    @property
    def cost_usd(self) -> float | None:
        """What the outputs cost in US dollars (``Metrics.cost_usd`` summed).

        ``None`` when any answered output is unpriced, so a partial sum never reads as the bill.
        """
        return _money_sum(self.outputs, "cost_usd")

    @property
    def cache_savings_usd(self) -> float | None:
        """Dollars the cache saved across the outputs (``Metrics.cache_savings_usd`` summed).

        ``None`` when any answered output is unpriced.
        """
        return _money_sum(self.outputs, "cache_savings_usd")

    @property
    def status(self) -> CollectionStatus:
        """``"ok"``, ``"partial"`` or ``"error"``, from execution failures (as in pollux 2.0).

        An output counts as failed when its interaction failed (``completion_status ==
        "error"``). An empty but clean answer is not a failure (check ``Output.has_answer`` for
        that). An empty collection is ``"ok"``.
        """
        if not self.outputs:
            return "ok"
        failed = sum(1 for output in self.outputs if output.failed)
        if failed == len(self.outputs):
            return "error"
        return "partial" if failed else "ok"

    @property
    def errors(self) -> list[dict[str, Any] | None]:
        """Per-interaction error descriptions (``None`` for interactions that did not fail)."""
        return [output.diagnostics.error for output in self.outputs]

    def to_jsonable(self) -> dict[str, Any]:
        """Serialize to a JSON-compatible dict with per-output detail and aggregates."""
        payload: dict[str, Any] = {
            "status": self.status,
            "outputs": [output.to_jsonable() for output in self.outputs],
            "usage": self.usage.to_jsonable(),
        }
        if self.prompt_indexes is not None:
            payload["prompt_indexes"] = list(self.prompt_indexes)
        if self.source_indexes is not None:
            payload["source_indexes"] = list(self.source_indexes)
        return payload

    @classmethod
    def from_jsonable(
        cls, data: Mapping[str, Any], *, response_schema: type[BaseModel] | None = None
    ) -> OutputCollection:
        """Rebuild a collection from :meth:`to_jsonable` output (aggregates are recomputed).

        Raises:
            ConfigurationError: The data is not a serialized collection.
        """
        data = require_mapping(data, "OutputCollection")
        outputs = tuple(
            Output.from_jsonable(item, response_schema=response_schema)
            for item in get_list(data, "outputs", "OutputCollection")
        )
        return cls(
            outputs=outputs,
            prompt_indexes=_indexes(data, "prompt_indexes"),
            source_indexes=_indexes(data, "source_indexes"),
        )


def _hit_ratio(outputs: Sequence[Output]) -> float | None:
    reported = [o.usage for o in outputs if o.usage.reported and not o.failed]
    prompt = sum(u.input_tokens for u in reported)
    if not reported or not prompt:
        return None
    return sum(u.cached_tokens or 0 for u in reported) / prompt


def _money_sum(outputs: Sequence[Output], name: str) -> float | None:
    answered = [o for o in outputs if not o.failed]
    values = [getattr(o.metrics, name) for o in answered]
    if not answered or any(v is None for v in values):
        return None
    # Summed exactly, then read as one plain number.
    return float(sum((Decimal(repr(v)) for v in values), Decimal(0)))


def _indexes(data: Mapping[str, Any], key: str) -> tuple[int, ...] | None:
    if data.get(key) is None:
        return None
    items: Sequence[Any] = get_list(data, key, "OutputCollection")
    return tuple(get_int({key: item}, key, "OutputCollection") for item in items)
