"""Prompt caching on the Messages API: ``cache_control`` breakpoints on the stable prefix.

Anthropic caches a request prefix up to each block marked ``cache_control``; a later request with
the same prefix reads it at a tenth of the input price, while writing it costs a premium (1.25x
for the 5-minute TTL, 2x for the 1-hour TTL). So pollux marks what stays the same from call to
call, in prefix order, at most four breakpoints (the API's limit):

1. the last tool declaration (the tools),
2. the last system block (the instructions),
3. the last source block of the first user message (the environment's sources),
4. the last block of the replayed conversation (a continuation or history turn), so every turn of
   an agent loop reads the turns before it.

When to mark (``Environment.cache``):

- ``"none"``: never.
- ``None`` / ``"auto"`` / :class:`~pollux.CachePolicy`: single calls always (a prefix under the
  model's minimum is simply not cached and costs nothing extra). A ``run_many`` fan-out only when
  the stable prefix is big enough to be cached (estimated, see :func:`prefix_cacheable`); then the
  engine runs the first call alone to write the cache and fans the rest out to read it
  (:meth:`AnthropicProvider.warm_up_first`), instead of every call paying the write premium at
  once. A smaller prefix in a fan-out gets no breakpoints.
- :class:`~pollux.CachePolicy` picks the TTL: ``ttl_seconds=300`` (5 minutes, the default) or
  ``3600`` (1 hour). Other values are refused: Anthropic has only these two.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pollux.errors import ConfigurationError
from pollux.interaction.environment import CachePolicy

from .models import family

if TYPE_CHECKING:
    from pollux.interaction.environment import CacheSetting
    from pollux.interaction.tools import ToolDeclaration
    from pollux.source import Source

__all__ = [
    "MAX_BREAKPOINTS",
    "TTLS",
    "apply_breakpoints",
    "cache_control",
    "prefix_cacheable",
    "validate_cache",
]

#: The API's limit of ``cache_control`` breakpoints per request.
MAX_BREAKPOINTS = 4

#: ``CachePolicy.ttl_seconds`` -> the wire TTL.
TTLS = {300: "5m", 3600: "1h"}

# Rough size of a token in characters, for deciding whether a prefix can be cached at all.
_CHARS_PER_TOKEN = 4
# Blocks that may carry cache_control (thinking blocks may not).
_CACHEABLE_BLOCKS = frozenset({"text", "image", "document", "tool_use", "tool_result"})


def validate_cache(setting: CacheSetting) -> None:
    """Refuse a CachePolicy TTL Anthropic does not have (no I/O)."""
    ttl = setting.ttl_seconds if isinstance(setting, CachePolicy) else None
    if ttl is not None and ttl not in TTLS:
        raise ConfigurationError(
            f"provider='anthropic' caches for 5 minutes or 1 hour, not ttl_seconds={ttl}",
            hint="Use CachePolicy(ttl_seconds=300) or CachePolicy(ttl_seconds=3600).",
        )


def cache_control(setting: CacheSetting) -> dict[str, str] | None:
    """The ``cache_control`` value for a setting, or ``None`` when caching is off."""
    if setting == "none":
        return None
    control = {"type": "ephemeral"}
    if isinstance(setting, CachePolicy) and setting.ttl_seconds is not None:
        control["ttl"] = TTLS[setting.ttl_seconds]
    return control


def _source_tokens(source: Source) -> int:
    if source.source_type in ("text", "json", "file", "bytes"):
        mime = source.mime_type
        if mime.startswith("image/") or mime == "application/pdf":
            # An image is about 1.5k tokens, a PDF page more; either way worth caching.
            return 1 << 20
        return source.size_bytes // _CHARS_PER_TOKEN
    # Remote PDFs and images: their size is unknown here but never small.
    return 1 << 20


def prefix_cacheable(
    model: str | None,
    instructions: str | None,
    tools: Sequence[ToolDeclaration],
    sources: Sequence[Source],
) -> bool:
    """Whether the stable prefix (tools, instructions, sources) likely reaches the cache minimum.

    An estimate from sizes (about four characters per token; images and PDFs count as large), so
    it needs no I/O and no token-counting call.
    """
    tokens = len(instructions or "") // _CHARS_PER_TOKEN
    for tool in tools:
        tokens += (len(tool.name) + len(tool.description) + len(str(tool.parameters))) // 4
    for source in sources:
        tokens += _source_tokens(source)
        if tokens >= family(model).min_cache_tokens:
            return True
    return tokens >= family(model).min_cache_tokens


def _mark_last(blocks: list[Any], control: dict[str, str]) -> bool:
    for index in range(len(blocks) - 1, -1, -1):
        block = blocks[index]
        if isinstance(block, dict) and block.get("type") in _CACHEABLE_BLOCKS:
            blocks[index] = {**block, "cache_control": dict(control)}
            return True
    return False


def apply_breakpoints(
    kwargs: dict[str, Any],
    control: dict[str, str],
    *,
    source_count: int,
    conversation_end: int | None,
) -> int:
    """Mark the stable prefix of compiled ``messages.create`` kwargs in place; return the count.

    Args:
        kwargs: The compiled request (its lists are replaced by marked copies, never mutated).
        control: The ``cache_control`` value.
        source_count: How many leading blocks of the first user message are sources.
        conversation_end: Index of the last replayed message to mark, or ``None``.
    """
    marked = 0
    tools = kwargs.get("tools")
    if tools:
        copy = list(tools)
        copy[-1] = {**copy[-1], "cache_control": dict(control)}
        kwargs["tools"] = copy
        marked += 1
    system = kwargs.get("system")
    if isinstance(system, list) and system:
        copy = list(system)
        if _mark_last(copy, control):
            kwargs["system"] = copy
            marked += 1
    messages: list[dict[str, Any]] = kwargs["messages"]
    if source_count and messages:
        first = messages[0]
        content = list(first["content"])
        head = content[:source_count]
        if _mark_last(head, control):
            messages[0] = {**first, "content": head + content[source_count:]}
            marked += 1
    if conversation_end is not None and 0 <= conversation_end < len(messages):
        message = messages[conversation_end]
        content = list(message["content"])
        if marked < MAX_BREAKPOINTS and _mark_last(content, control):
            messages[conversation_end] = {**message, "content": content}
            marked += 1
    return marked
