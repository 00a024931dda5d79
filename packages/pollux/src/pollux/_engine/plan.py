"""Planning: every capability and input check, before any I/O.

``plan_calls`` turns an Environment, Inputs and OutputRequirements into ProviderRequests and
raises ConfigurationError (with a hint) for anything the provider cannot do. The order of checks
is deterministic, so the same mistake always produces the same error. Nothing here touches the
network, reads files, or uploads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pollux._engine.cache_miss import canonical_tools
from pollux.errors import ConfigurationError
from pollux.interaction.environment import CachePolicy, Environment
from pollux.interaction.input import Input
from pollux.providers.base import Capabilities, PreparedSources, ProviderRequest

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.interaction.requirements import OutputRequirements
    from pollux.providers.base import Provider

__all__ = ["Plan", "plan_calls"]

_UPLOAD_KINDS = frozenset({"file", "bytes"})


@dataclass(frozen=True, slots=True)
class Plan:
    """Validated requests for one call (one per input), sharing one environment."""

    environment: Environment
    requests: tuple[ProviderRequest, ...]
    capabilities: Capabilities


def _require(flag: bool, what: str, provider: str, hint: str) -> None:
    if not flag:
        raise ConfigurationError(f"{provider} does not support {what}", hint=hint)


def _check_requirements(req: OutputRequirements, caps: Capabilities, provider: str) -> None:
    if req.output_schema is not None:
        _require(
            caps.structured_outputs,
            "structured output (output=...)",
            provider,
            "Drop output=, parse the text yourself, or use a provider with structured outputs "
            "(declare capabilities={'structured_outputs': True} if your server supports it).",
        )
    if req.reasoning_effort is not None:
        _require(
            caps.reasoning,
            "reasoning_effort",
            provider,
            "Drop reasoning_effort, or pass the server's own option through provider_options.",
        )
    if req.reasoning_budget_tokens is not None:
        _require(
            caps.reasoning_budget_tokens,
            "reasoning_budget_tokens",
            provider,
            "Use reasoning_effort where supported, or drop the budget.",
        )
    if req.temperature is not None:
        _require(caps.temperature, "temperature", provider, "Drop temperature=.")
    if req.top_p is not None:
        _require(caps.top_p, "top_p", provider, "Drop top_p=.")
    if req.max_tokens is not None:
        _require(caps.max_tokens, "max_tokens", provider, "Drop max_tokens=.")
    if req.seed is not None:
        _require(
            caps.seed,
            "seed",
            provider,
            "Drop seed=; this provider cannot make sampling reproducible.",
        )


def _check_environment(env: Environment, caps: Capabilities, provider: str) -> None:
    if env.tools:
        _require(caps.tools, "tools", provider, "Drop the tools, or use a provider with tools.")
    if isinstance(env.cache, CachePolicy):
        _require(
            caps.persistent_cache or caps.prompt_cache_ttl,
            "persistent caches (CachePolicy)",
            provider,
            "Use cache='auto' or None here; CachePolicy works with provider='gemini' "
            "(context caches) and provider='anthropic' (the prompt-cache TTL).",
        )
    for source in env.sources:
        if source.source_type in _UPLOAD_KINDS and not caps.uploads:
            raise ConfigurationError(
                f"{provider} cannot take local file sources ({source.identifier!r})",
                hint="Pass the content as Source.from_text(...), or use a provider with "
                "file support.",
            )


def _check_input(
    item: Input, caps: Capabilities, provider: str, env: Environment, req: OutputRequirements
) -> Mapping[str, Any] | None:
    if not isinstance(item, Input):
        raise ConfigurationError(
            f"input must be an Input, got {type(item).__name__}",
            hint="Pass Input('your prompt'), or Input(continuation=..., tool_results=[...]).",
        )
    state: Mapping[str, Any] | None = None
    if item.history is not None or item.continuation is not None:
        _require(
            caps.conversation,
            "conversation state (history / continuation)",
            provider,
            "Send a fresh Input without history or continuation.",
        )
    if item.continuation is not None:
        item.continuation._require_provider(provider)
        state = item.continuation._state
    if item.tool_results:
        if item.continuation is None and item.history is None:
            raise ConfigurationError(
                "tool_results were given, but there is no prior turn to answer",
                hint="Pass Input(continuation=output.continuation, tool_results=[...]).",
            )
        if any(result.is_error for result in item.tool_results):
            _require(
                caps.tool_result_errors,
                "marking tool results as errors (ToolResult.is_error)",
                provider,
                "Describe the failure in ToolResult.content and leave is_error=False.",
            )
    return state


def plan_calls(
    provider: Provider,
    config: Config,
    environment: Environment,
    inputs: Sequence[Input],
    requirements: OutputRequirements,
    *,
    stream: bool = False,
) -> Plan:
    """Validate everything and build one ProviderRequest per input (no I/O).

    Raises:
        ConfigurationError: An unsupported or malformed combination; the hint says how to fix it.
    """
    name = provider.name
    caps = provider.capabilities_for(config.model)
    if stream:
        _require(caps.streaming, "streaming", name, "Use interact() instead of stream().")
    _check_requirements(requirements, caps, name)
    _check_environment(environment, caps, name)
    if requirements.tool_choice is not None and not environment.tools:
        raise ConfigurationError(
            "tool_choice was given without tools",
            hint="Declare the tools on the Environment (or tools=...), or drop tool_choice.",
        )
    tool_choice = requirements.tool_choice
    if isinstance(tool_choice, Mapping):
        names = {tool.name for tool in environment.tools}
        if tool_choice["name"] not in names:
            raise ConfigurationError(
                f"tool_choice names an undeclared tool: {tool_choice['name']!r}",
                hint="Declared tools: " + ", ".join(sorted(names)),
            )
    # provider_options entries for other known providers are ignored, so one set of
    # requirements works across providers (OutputRequirements refuses unknown names).
    if len(inputs) > 1 and any(
        item.history is not None or item.continuation is not None for item in inputs
    ):
        raise ConfigurationError(
            "conversation state (history / continuation) needs exactly one input per call",
            hint="Continue one conversation at a time with interact().",
        )
    placeholder = PreparedSources(sources=tuple(environment.sources))
    # Canonical order and schema form: reordering tools alone never changes a cached prefix.
    tools = canonical_tools(environment.tools) if environment.tools else ()
    requests: list[ProviderRequest] = []
    for item in inputs:
        state = _check_input(item, caps, name, environment, requirements)
        request = ProviderRequest(
            model=config.model,
            instructions=environment.instructions,
            sources=placeholder,
            tools=tools,
            input=item,
            requirements=requirements,
            continuation_state=state,
            stream=stream,
            cache=environment.cache,
            fanout=len(inputs),
        )
        provider.validate(request)
        requests.append(request)
    return Plan(environment=environment, requests=tuple(requests), capabilities=caps)
