"""OutputRequirements: per-interaction controls for the response pollux asks for."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from pollux.config import PROVIDER_NAMES
from pollux.errors import ConfigurationError

from ._json import canonical_dumps, is_finite_number, json_copy
from ._schema_check import check_schema
from .tools import ToolChoice, validate_tool_choice

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "OutputRequirements",
    "ResponseSchemaInput",
    "is_pydantic_model_class",
    "response_schema_hash",
    "response_schema_json",
]

ResponseSchemaInput = Union["type[BaseModel]", dict[str, Any]]
"""A pydantic model class or a JSON Schema dict."""


def is_pydantic_model_class(value: object) -> bool:
    """True when ``value`` is a pydantic ``BaseModel`` subclass.

    pydantic is not imported for the check: when it was never imported, no model exists.
    """
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(value, type):
        return False
    return issubclass(value, pydantic.BaseModel)


def response_schema_json(schema: ResponseSchemaInput | None) -> dict[str, Any] | None:
    """Return the JSON Schema of a pydantic model class or schema dict (a copy)."""
    if schema is None:
        return None
    if isinstance(schema, dict):
        return dict(json_copy(schema, what="output_schema"))
    return dict(schema.model_json_schema())


def response_schema_hash(schema: ResponseSchemaInput | None) -> str | None:
    """Return a stable SHA-256 of the JSON Schema (``None`` without a schema)."""
    payload = response_schema_json(schema)
    if payload is None:
        return None
    return hashlib.sha256(canonical_dumps(payload).encode("utf-8")).hexdigest()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return is_finite_number(value)


@dataclass(frozen=True, slots=True)
class OutputRequirements:
    """Per-interaction controls for the response pollux asks the model to produce.

    Args:
        output_schema: A pydantic model class or JSON Schema dict for structured output.
        temperature: Sampling temperature (a number >= 0).
        top_p: Nucleus-sampling probability, in ``[0, 1]``.
        max_tokens: Hard cap on output tokens (an integer > 0).
        seed: Sampling seed where supported (an integer).
        reasoning_effort: Qualitative reasoning effort (for example ``"low"``).
        reasoning_budget_tokens: Explicit reasoning token budget (an integer >= 0).
            Exclusive with ``reasoning_effort``.
        tool_choice: ``"auto"``, ``"required"``, ``"none"`` or ``{"name": ...}``.
        provider_options: Raw generation options keyed by provider name, passed through to
            the active provider only.

    Raises:
        ConfigurationError: A value breaks the rules above.

    Example:
        >>> req = OutputRequirements(max_tokens=256, provider_options={"openai": {"store": False}})
        >>> req.provider_options_for("openai"), req.provider_options_for("gemini")
        ({'store': False}, None)
    """

    output_schema: ResponseSchemaInput | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    reasoning_effort: str | None = None
    reasoning_budget_tokens: int | None = None
    tool_choice: ToolChoice | None = None
    provider_options: dict[str, dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        """Validate shapes early for clear errors."""
        schema = self.output_schema
        if schema is not None:
            if isinstance(schema, dict):
                json_copy(schema, what="output_schema")
                check_schema(schema)
            elif not is_pydantic_model_class(schema):
                raise ConfigurationError(
                    "output_schema must be a Pydantic model class or JSON schema dict",
                    hint="Pass a BaseModel subclass or a dict following JSON Schema.",
                )
        if self.temperature is not None and (
            not _is_number(self.temperature) or self.temperature < 0
        ):
            raise ConfigurationError(
                f"temperature must be a number >= 0, got {self.temperature!r}",
                hint="Pass temperature=0.2, for example.",
            )
        if self.top_p is not None and (not _is_number(self.top_p) or not 0 <= self.top_p <= 1):
            raise ConfigurationError(
                f"top_p must be a number in [0, 1], got {self.top_p!r}",
                hint="Pass top_p=0.9, for example.",
            )
        if self.max_tokens is not None and (not _is_int(self.max_tokens) or self.max_tokens <= 0):
            raise ConfigurationError(
                "max_tokens must be a positive integer",
                hint="Pass max_tokens=16384 or greater for thinking models.",
            )
        if self.seed is not None and not _is_int(self.seed):
            raise ConfigurationError(
                "seed must be an integer",
                hint="Pass seed=42 for reproducible sampling where supported.",
            )
        if self.reasoning_effort is not None and (
            not isinstance(self.reasoning_effort, str) or not self.reasoning_effort.strip()
        ):
            raise ConfigurationError(
                f"reasoning_effort must be a non-empty string, got {self.reasoning_effort!r}",
                hint="Pass reasoning_effort='low', 'medium' or 'high'.",
            )
        budget = self.reasoning_budget_tokens
        if budget is not None and (not _is_int(budget) or budget < 0):
            raise ConfigurationError(
                "reasoning_budget_tokens must be a non-negative integer",
                hint="Pass reasoning_budget_tokens=0 or a larger integer.",
            )
        if self.reasoning_effort is not None and budget is not None:
            raise ConfigurationError(
                "reasoning_effort and reasoning_budget_tokens are mutually exclusive",
                hint="Choose either qualitative effort or an explicit token budget.",
            )
        if self.tool_choice is not None:
            validate_tool_choice(self.tool_choice)
        if self.provider_options is not None:
            _validate_provider_options(self.provider_options)

    def output_schema_json(self) -> dict[str, Any] | None:
        """Return the JSON Schema to send to providers (``None`` without a schema)."""
        return response_schema_json(self.output_schema)

    def output_schema_model(self) -> type[BaseModel] | None:
        """Return the pydantic model class, when one was given."""
        schema = self.output_schema
        if schema is not None and not isinstance(schema, dict):
            return schema
        return None

    def output_schema_hash(self) -> str | None:
        """Return a stable hash of the JSON Schema (``None`` without a schema)."""
        return response_schema_hash(self.output_schema)

    def provider_options_for(self, provider: str) -> dict[str, Any] | None:
        """Return the raw generation options for ``provider`` (a copy), or ``None``."""
        if self.provider_options is None:
            return None
        payload = self.provider_options.get(provider)
        return dict(payload) if payload is not None else None


def _validate_provider_options(options: object) -> None:
    if not isinstance(options, Mapping):
        raise ConfigurationError(
            "provider_options must be a dict keyed by provider name",
            hint="Pass provider_options={'openai': {'store': False}}, for example.",
        )
    for provider, payload in options.items():
        if provider not in PROVIDER_NAMES:
            raise ConfigurationError(
                f"provider_options has an unknown provider key: {provider!r}",
                hint="Key options by provider: " + ", ".join(PROVIDER_NAMES) + ".",
            )
        if not isinstance(payload, Mapping):
            raise ConfigurationError(
                f"provider_options[{provider!r}] must be a dict",
                hint="Pass provider_options={'openai': {'store': False}}, for example.",
            )
