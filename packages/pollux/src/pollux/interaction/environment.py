"""Environment: the reusable, model-facing setup around interactions."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pollux.errors import ConfigurationError
from pollux.source import Source

from ._json import canonical_dumps, json_copy
from .tools import ToolDeclaration

__all__ = ["FINGERPRINT_VERSION", "CachePolicy", "CacheSetting", "Environment"]

#: Embedded in every fingerprint; bumped when the fingerprint's meaning changes.
FINGERPRINT_VERSION = 1


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """Ask for a persistent (explicit) provider cache of the environment.

    Args:
        ttl_seconds: How long the provider keeps the cache, in seconds; ``None`` uses the
            provider's default.

    Example:
        >>> CachePolicy(ttl_seconds=3600)
        CachePolicy(ttl_seconds=3600)
    """

    ttl_seconds: int | None = None

    def __post_init__(self) -> None:
        """Validate the TTL."""
        ttl = self.ttl_seconds
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0):
            raise ConfigurationError(
                f"CachePolicy.ttl_seconds must be a positive integer or None, got {ttl!r}",
                hint="Pass ttl_seconds=3600 for one hour, or None for the provider default.",
            )


CacheSetting: TypeAlias = CachePolicy | Literal["auto", "none"] | None
"""A :class:`CachePolicy` (persistent cache), ``"auto"`` (provider-managed), ``"none"``
(disable), or ``None`` (the default)."""


def _as_tuple(value: object, what: str, hint: str) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigurationError(
            f"{what} must be a sequence, got {type(value).__name__}", hint=hint
        )
    return tuple(value)


@dataclass(frozen=True, slots=True)
class Environment:
    """The reusable, stable, model-facing setup around interactions.

    ``sources`` and ``tools`` accept any ordered sequence and are frozen to tuples. Tools must
    be :class:`ToolDeclaration` values (build one from a dict with
    :meth:`ToolDeclaration.from_dict`).

    Args:
        instructions: System-level instructions.
        sources: Stable sources every interaction sees.
        tools: Tools the model may call.
        cache: The cache preference (see :data:`CacheSetting`).
        metadata: Provider-neutral application metadata; not sent to the model.

    Raises:
        ConfigurationError: A field has the wrong type.

    Example:
        >>> env = Environment(instructions="Be brief.", sources=[Source.from_text("x")])
        >>> len(env.fingerprint(provider="openai"))
        64
    """

    instructions: str | None = None
    sources: Sequence[Source] = ()
    tools: Sequence[ToolDeclaration] = ()
    cache: CacheSetting = None
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Freeze the sequences to tuples and validate every field."""
        if self.instructions is not None and not isinstance(self.instructions, str):
            raise ConfigurationError(
                f"instructions must be a string, got {type(self.instructions).__name__}",
                hint="Pass the system prompt as text.",
            )
        sources = _as_tuple(self.sources, "sources", "Pass a list of Source values.")
        for source in sources:
            if not isinstance(source, Source):
                raise ConfigurationError(
                    f"sources must contain Source values, got {type(source).__name__}",
                    hint="Wrap content with Source.from_text(), Source.from_file(), ...",
                )
        tools = _as_tuple(self.tools, "tools", "Pass a list of ToolDeclaration values.")
        for tool in tools:
            if not isinstance(tool, ToolDeclaration):
                raise ConfigurationError(
                    f"tools must contain ToolDeclaration values, got {type(tool).__name__}",
                    hint="Build declarations from dicts with ToolDeclaration.from_dict(...).",
                )
        names = [tool.name for tool in tools]
        if len(set(names)) != len(names):
            raise ConfigurationError(
                "Tool names must be unique within an environment",
                hint="Rename or drop the duplicate ToolDeclaration.",
            )
        if not (self.cache is None or self.cache in ("auto", "none")) and not isinstance(
            self.cache, CachePolicy
        ):
            raise ConfigurationError(
                f"Invalid cache setting: {self.cache!r}",
                hint="Use CachePolicy(ttl_seconds=...), 'auto', 'none', or None.",
            )
        if self.metadata is not None:
            if not isinstance(self.metadata, dict):
                raise ConfigurationError(
                    f"metadata must be a dict or None, got {type(self.metadata).__name__}",
                    hint="Pass metadata={'team': 'research'}, for example.",
                )
            object.__setattr__(self, "metadata", dict(self.metadata))
        object.__setattr__(self, "sources", sources)
        object.__setattr__(self, "tools", tools)

    def fingerprint(self, *, provider: str) -> str:
        """Return a stable identity of the provider-visible environment.

        The fingerprint covers the instructions, the ordered sources (content, MIME type, file
        name without its directory, and the hints that apply to ``provider``), the ordered
        tools, and the provider. The model belongs to :class:`Config` and must be combined
        separately. ``cache`` and ``metadata`` are excluded: they do not change what the model
        sees. The value is stable across processes and versioned: a semantic change bumps
        the embedded version.

        Raises:
            ConfigurationError: ``provider`` is empty, or a tool schema is not JSON.
            SourceError: A source file can no longer be read.
        """
        if not isinstance(provider, str) or not provider:
            raise ConfigurationError(
                "Environment fingerprint requires a non-empty provider",
                hint="Pass config.provider when creating durable identity.",
            )
        payload = {
            "version": FINGERPRINT_VERSION,
            "provider": provider,
            "instructions": self.instructions,
            "sources": [source._environment_identity(provider=provider) for source in self.sources],
            "tools": [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": json_copy(tool.parameters, what=f"tool {tool.name!r}"),
                    "strict": tool.strict,
                }
                for tool in self.tools
            ],
        }
        try:
            encoded = canonical_dumps(payload).encode("utf-8")
        except (TypeError, ValueError) as exc:  # pragma: no cover - json_copy guards this
            raise ConfigurationError(
                "Environment identity is not JSON serializable",
                hint="Use JSON-compatible tool schemas and provider hints.",
            ) from exc
        return hashlib.sha256(encoded).hexdigest()
