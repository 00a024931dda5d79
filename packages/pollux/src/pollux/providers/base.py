"""The provider boundary: what the engine asks of every provider, in neutral types.

A provider is one small package under ``pollux.providers``, registered in
``pollux.providers._registry`` and constructed as ``ProviderClass(config)``. The engine talks to it
only through the :class:`Provider` protocol below, in this order for every interaction:

1. ``capabilities_for(model)`` and ``validate(request)``: pure checks, no I/O. Anything the
   provider cannot do raises :class:`~pollux.errors.ConfigurationError` with a hint. A parameter
   is forwarded or rejected here, never silently dropped.
2. ``preflight(request)``: pre-flight that may read provider metadata but has no side effect (for
   example the OpenRouter model catalog, cached per Session). Still before any upload.
3. ``prepare_sources(sources)`` (or ``prepare_cache(request, policy)`` when the Environment has
   a ``CachePolicy`` and the provider declares ``persistent_cache``): once per call (once for a
   whole ``run_many`` fan-out), turn the environment's sources into provider wire parts,
   uploading when needed. Whatever it uploads is listed in :attr:`PreparedSources.owned` and
   released by ``release_sources`` in a ``finally``. Skipped when ``needs_sources(request)`` is
   False for every call (a continuation whose provider keeps the earlier input server-side, so
   the sources are not sent again).
4. ``compile(request)``: build the wire payload once; retries reuse it.
5. ``execute(compiled)`` (request plus response extraction) or ``stream(compiled)`` (an async
   iterator of :class:`StreamChunk`). Both raise :class:`~pollux.errors.APIError` (or a subclass)
   with ``provider``, ``phase``, ``status_code``, ``retryable``, ``retry_after_s``,
   ``error_category`` and a ``hint`` filled in (``pollux.providers._errors`` builds them); the
   engine stamps ``call_idx``. Providers never retry on their own: the engine's single retry loop
   does, so SDK-internal retries must be off (``max_retries=0``).
6. ``continuation_state(request, response)``: the provider-private replay state the engine seals
   into a :class:`~pollux.interaction.continuation.Continuation`.

Capabilities are declared once per provider in a :class:`Capabilities` table. Declared names in
``Config.capabilities`` override it for one config (useful for local servers whose support varies).

A provider may also define ``warm_up_first(requests) -> bool`` (found with ``getattr``): when it
returns True for a fan-out, the engine runs the first call alone and then the rest, so the rest
read the prompt cache the first one wrote (Anthropic's ``cache_control``) instead of each paying
to write it.

Deferred delivery is an optional side of the boundary: a provider that declares
``deferred_delivery`` also implements :class:`pollux.providers._deferred.DeferredBackend`
(submit, inspect, collect, cancel); the engine checks both before any I/O.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from pollux._scrub import scrub
from pollux.config import KNOWN_CAPABILITIES
from pollux.errors import ConfigurationError, InternalError

if TYPE_CHECKING:
    from pollux.interaction.environment import CachePolicy, CacheSetting
    from pollux.interaction.input import Input
    from pollux.interaction.output import Usage
    from pollux.interaction.requirements import OutputRequirements
    from pollux.interaction.tools import ToolCall, ToolCallDelta, ToolDeclaration
    from pollux.source import Source

__all__ = [
    "TOOL_CALL_STATES",
    "CacheUse",
    "Capabilities",
    "PreparedSources",
    "Provider",
    "ProviderBase",
    "ProviderReadiness",
    "ProviderRequest",
    "ProviderResponse",
    "StreamChunk",
]

#: ``StreamChunk.provider_state`` key for per-call replay state, ``{"<call index>": {...}}``:
#: the engine attaches each entry to the assembled call's ``ToolCall.provider_state`` (Gemini
#: thought signatures), so streamed calls equal the calls ``execute`` returns.
TOOL_CALL_STATES = "tool_call_states"


@dataclass(frozen=True, slots=True)
class Capabilities:
    """One provider's capability table (declare it once, as a module constant).

    Every flag answers "may the engine send this?". The engine checks them before any I/O and raises
    ConfigurationError with a hint for anything unsupported; providers then validate the finer
    points (MIME types, model families) in ``Provider.validate``.
    """

    #: ``stream()`` is implemented.
    streaming: bool = False
    #: ``output=`` (JSON Schema / pydantic) structured output.
    structured_outputs: bool = False
    #: ``reasoning_effort``.
    reasoning: bool = False
    #: ``reasoning_budget_tokens``.
    reasoning_budget_tokens: bool = False
    #: Function tools (declarations, ``tool_choice``, tool results).
    tools: bool = False
    #: Prior-turn state: ``Input.history`` and ``Input.continuation``.
    conversation: bool = False
    #: Local file sources (uploaded or inlined by the provider).
    uploads: bool = False
    #: ``CachePolicy`` persistent caches.
    persistent_cache: bool = False
    #: Provider-managed implicit caching (``cache="auto"``).
    implicit_caching: bool = False
    #: ``CachePolicy(ttl_seconds=...)`` sets the TTL of provider-managed prompt caching (the
    #: provider validates the value), without a persistent cache object.
    prompt_cache_ttl: bool = False
    #: ``defer()`` and friends.
    deferred_delivery: bool = False
    #: Sampling parameters.
    temperature: bool = True
    top_p: bool = True
    seed: bool = False
    max_tokens: bool = True
    #: ``ToolResult.is_error`` can be expressed on the wire.
    tool_result_errors: bool = False

    def with_overrides(self, overrides: Mapping[str, bool] | None) -> Capabilities:
        """Return a copy where declared overrides win over the static table.

        Raises:
            ConfigurationError: An override names no capability or is not a bool.
        """
        if not overrides:
            return self
        known = {f.name for f in fields(self)}
        changes: dict[str, bool] = {}
        for name, value in overrides.items():
            if name not in known:
                raise ConfigurationError(
                    f"Unknown capability override: {name!r}",
                    hint="Declarable capabilities: " + ", ".join(sorted(known)),
                )
            if not isinstance(value, bool):
                raise ConfigurationError(
                    f"Capability override {name!r} must be a bool, got {type(value).__name__}",
                    hint=f"Pass capabilities={{{name!r}: True}} or False.",
                )
            changes[name] = value
        return replace(self, **changes)


if {f.name for f in fields(Capabilities)} != KNOWN_CAPABILITIES:  # pragma: no cover - a guard
    # The table and Config's list of overridable names are one set of names.
    raise InternalError(
        "Capabilities and config.KNOWN_CAPABILITIES disagree",
        hint="Add the capability to both pollux.config.KNOWN_CAPABILITIES and Capabilities.",
    )


@dataclass(frozen=True, slots=True)
class CacheUse:
    """A persistent provider cache that holds a call's environment (see ``prepare_cache``).

    Attributes:
        name: The provider's cache resource name (``cachedContents/...`` on Gemini).
        created: True when this call created the cache; False when an existing one was found.
        tokens: The tokens the cache stores (what storage is billed on), when reported.
        ttl_seconds: The lifetime the cache was created with (a created cache only).
    """

    name: str
    created: bool = False
    tokens: int | None = None
    ttl_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class PreparedSources:
    """An environment's sources turned into provider wire parts, once per call.

    ``parts`` is provider-private (the engine never looks inside); ``owned`` lists provider-side
    artifacts (for example uploaded file ids) that ``release_sources`` deletes afterwards.
    ``cache`` is set when a persistent cache holds the environment: the provider then sends the
    cache reference instead of the parts, and the engine reports the cache in ``Metrics``.
    """

    sources: tuple[Source, ...] = ()
    parts: tuple[Any, ...] = ()
    owned: tuple[str, ...] = ()
    cache: CacheUse | None = None


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    """One neutral, validated interaction, ready to compile.

    ``continuation_state`` is the provider-private state sealed in ``input.continuation`` (already
    checked to belong to this provider); providers read it instead of the opaque Continuation.
    """

    model: str | None
    instructions: str | None
    sources: PreparedSources
    tools: tuple[ToolDeclaration, ...]
    input: Input
    requirements: OutputRequirements
    continuation_state: Mapping[str, Any] | None = None
    stream: bool = False
    #: The environment's cache preference (``Environment.cache``).
    cache: CacheSetting = None
    #: How many calls of one ``run_many`` share this environment (1 for single calls).
    fanout: int = 1


@dataclass(frozen=True, slots=True)
class ProviderResponse:
    """A completed provider response in neutral form (the engine assembles the Output from it).

    ``structured`` is the parsed JSON when the provider parsed it itself; otherwise the engine
    parses ``text`` when a schema was requested. ``provider_state`` is replayable provider data
    (for example reasoning blocks) kept for continuations; ``artifacts`` are extras worth surfacing
    in ``diagnostics.raw`` (annotations, citations).
    """

    text: str = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    structured: Any = None
    provider_state: dict[str, Any] | None = None
    artifacts: dict[str, Any] | None = None

    def to_jsonable(self) -> dict[str, Any]:
        """The normalized response dict stored in ``Output.diagnostics.raw["response"]``."""
        payload: dict[str, Any] = {"text": self.text, "finish_reason": self.finish_reason}
        if self.reasoning is not None:
            payload["reasoning"] = self.reasoning
        if self.tool_calls:
            payload["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments_text} for c in self.tool_calls
            ]
        if self.usage is not None:
            payload["usage"] = self.usage.to_jsonable()
        if self.response_id is not None:
            payload["response_id"] = self.response_id
        if self.structured is not None:
            payload["structured"] = self.structured
        if self.provider_state is not None:
            payload["provider_state"] = self.provider_state
        if self.artifacts is not None:
            payload["artifacts"] = self.artifacts
        return payload


@dataclass(slots=True)
class StreamChunk:
    """One provider stream increment in neutral form (treat it as immutable).

    Not a frozen dataclass on purpose: one is built per streamed token, and a frozen
    constructor costs about four times as much.

    ``usage`` is the provider's latest *cumulative* usage when present (it replaces the previous
    one). ``tool_call_deltas`` are fragments keyed by ``index``; the engine concatenates argument
    fragments per index. ``provider_state`` entries are merged key by key (per-call state goes
    under :data:`TOOL_CALL_STATES`). ``tool_calls``, when a chunk sets them, are the turn's
    complete calls and replace the assembled fragments (a provider whose one-shot responses carry
    parsed arguments reports the calls as its one-shot path would, so ``done.output`` equals what
    ``interact`` returns). A provider should end its stream normally only when the response is
    complete; a cut stream must raise APIError.
    """

    text: str = ""
    reasoning: str = ""
    tool_call_deltas: tuple[ToolCallDelta, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    provider_state: dict[str, Any] | None = None
    structured: Any = None
    artifacts: dict[str, Any] | None = None
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class ProviderReadiness:
    """Result of :func:`pollux.check_ready`: can this config talk to its provider right now?

    Attributes:
        ready: True when the provider answered (and the model is listed, when it was checked).
        provider: The provider name.
        status_code: The HTTP status of the probe, when one was made.
        message: What was checked, or what went wrong and how to fix it.
        model: The configured model.
        model_verified: True when the provider's model list was read and contains the model.
    """

    ready: bool
    provider: str
    status_code: int | None = None
    message: str = ""
    model: str | None = None
    model_verified: bool = False

    def __post_init__(self) -> None:
        """Scrub secrets from the message (it quotes server error bodies)."""
        if isinstance(self.message, str):
            object.__setattr__(self, "message", scrub(self.message))


@runtime_checkable
class Provider(Protocol):
    """What the engine needs from a provider. See the module docstring for the call order."""

    #: The provider name as in ``Config.provider`` (``"mock"`` is reported as the configured name).
    name: str

    def capabilities_for(self, model: str | None) -> Capabilities:
        """The capability table for one model (usually the static table)."""
        ...

    def validate(self, request: ProviderRequest) -> None:
        """Provider-specific checks with no I/O; raise ConfigurationError with a hint."""
        ...

    async def preflight(self, request: ProviderRequest) -> None:
        """Checks that may read provider metadata (cached); no side effects, no uploads."""
        ...

    def needs_sources(self, request: ProviderRequest) -> bool:
        """Whether this call sends the environment's sources (no I/O)."""
        ...

    async def prepare_sources(self, sources: Sequence[Source]) -> PreparedSources:
        """Turn sources into wire parts once per call; list owned uploads for release."""
        ...

    async def release_sources(self, prepared: PreparedSources) -> None:
        """Best-effort release of what ``prepare_sources`` created (never raises)."""
        ...

    async def prepare_cache(self, request: ProviderRequest, policy: CachePolicy) -> PreparedSources:
        """Find or create the persistent cache for ``request``'s environment (``CachePolicy``)."""
        ...

    def compile(self, request: ProviderRequest) -> Any:
        """Build the wire payload once; retries reuse it."""
        ...

    async def execute(self, compiled: Any) -> ProviderResponse:
        """Send one compiled request and extract the neutral response."""
        ...

    def stream(self, compiled: Any) -> AsyncIterator[StreamChunk]:
        """Send one compiled streaming request; yield neutral chunks; close cleanly."""
        ...

    def continuation_state(
        self, request: ProviderRequest, response: ProviderResponse
    ) -> dict[str, Any]:
        """Provider-private replay state for the next turn (JSON-compatible)."""
        ...

    async def check_ready(self, model: str | None) -> ProviderReadiness:
        """Readiness probe used by ``check_ready``."""
        ...

    async def aclose(self) -> None:
        """Close clients and connections (idempotent)."""
        ...


class ProviderBase:
    """Optional base class with the no-op defaults most providers want.

    Subclasses set ``name`` and ``CAPABILITIES`` and implement ``compile``, ``execute``,
    ``continuation_state`` and, when streaming is declared, ``stream``.
    """

    name: str = ""
    CAPABILITIES: ClassVar[Capabilities] = Capabilities()

    def capabilities_for(self, model: str | None) -> Capabilities:
        """The static capability table."""
        return self.CAPABILITIES

    def validate(self, request: ProviderRequest) -> None:
        """No provider-specific checks by default."""

    async def preflight(self, request: ProviderRequest) -> None:
        """No pre-flight by default."""

    async def warm(self) -> None:
        """Load what the first call needs (an SDK) off the event loop; nothing by default.

        The engine awaits it before a call's deadline starts (see ``providers/_warm.py``).
        """

    def needs_sources(self, request: ProviderRequest) -> bool:
        """Every call sends the sources by default."""
        return True

    async def prepare_sources(self, sources: Sequence[Source]) -> PreparedSources:
        """Keep the sources as they are; the provider compiles them itself."""
        return PreparedSources(sources=tuple(sources))

    async def release_sources(self, prepared: PreparedSources) -> None:
        """Nothing to release by default."""

    async def prepare_cache(self, request: ProviderRequest, policy: CachePolicy) -> PreparedSources:
        """Find or create the persistent cache holding ``request``'s environment.

        Called instead of ``prepare_sources`` when the Environment has a ``CachePolicy`` and the
        provider declares ``persistent_cache``. The result's ``cache`` names the cache.

        Raises:
            ConfigurationError: This provider has no persistent caches.
        """
        raise ConfigurationError(
            f"{self.name} does not support persistent caches (CachePolicy)",
            hint="Use cache='auto' or None.",
        )

    async def check_ready(self, model: str | None) -> ProviderReadiness:
        """Report ready without a probe (providers with a cheap probe override this)."""
        return ProviderReadiness(
            ready=True, provider=self.name, model=model, message="no readiness probe"
        )

    async def aclose(self) -> None:
        """Nothing to close by default."""
