"""What differs between Claude model families, decided from the model name alone (no I/O).

- Default ``max_tokens`` (the Messages API requires one): 4096 on Claude 3 (Haiku, Sonnet,
  Opus), 8192 on Claude 3.5, 16384 from Claude 3.7 on.
- Reasoning: Claude 3.7 and every Claude 4 or later model think; Claude 3 and 3.5 do not.
- Adaptive thinking (``thinking={"type": "adaptive"}``, effort-driven) on Opus 4.6 and later,
  Sonnet 4.6 and every generation-5 model; the others take a manual ``budget_tokens``.
- ``output_config.effort`` on the models that have it (Opus 4.5 and the adaptive ones); the
  ``max`` effort only on Opus 4.6 and later and generation 5.
- Prompt-cache minimum prefix sizes: 4096 tokens on Opus 4.5+ / Haiku 4.5+, 2048 on Haiku 3.x,
  1024 elsewhere (a shorter prefix is simply not cached).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["EFFORTS", "EFFORT_BUDGETS", "ModelFamily", "family"]

#: Reasoning efforts pollux accepts for Anthropic.
EFFORTS = ("low", "medium", "high", "max")

#: Thinking budgets an effort maps to on models with manual thinking.
EFFORT_BUDGETS = {"low": 2048, "medium": 5120, "high": 10240, "max": 12288}

# claude-opus-4-6, claude-sonnet-4-5-20250929, claude-haiku-5-5, claude-opus-5.
_MODERN = re.compile(r"^claude-([a-z]+)-(\d+)(?:-(\d{1,2}))?(?:-\d{8})?(?:$|-)")
# claude-3-5-sonnet-20241022, claude-3-opus-20240229, claude-3-7-sonnet-latest.
_LEGACY = re.compile(r"^claude-(\d+)(?:-(\d))?-([a-z]+)")


@dataclass(frozen=True, slots=True)
class ModelFamily:
    """The facts pollux needs about one model name."""

    tier: str
    major: int
    minor: int

    @property
    def version(self) -> tuple[int, int]:
        """(major, minor), for ordering."""
        return (self.major, self.minor)

    @property
    def default_max_tokens(self) -> int:
        """The ``max_tokens`` sent when the caller gives none."""
        if self.major == 3 and self.minor == 0:
            return 4096
        if self.version == (3, 5):
            return 8192
        return 16384

    @property
    def reasoning(self) -> bool:
        """Whether the model has extended thinking."""
        return self.version >= (3, 7)

    @property
    def adaptive_thinking(self) -> bool:
        """Whether thinking is adaptive (effort-driven) rather than budget-driven."""
        if self.major >= 5:
            return True
        if self.tier == "opus":
            return self.version >= (4, 6)
        if self.tier == "sonnet":
            return self.version >= (4, 6)
        return False

    @property
    def effort(self) -> bool:
        """Whether ``output_config.effort`` is accepted."""
        return self.adaptive_thinking or (self.tier == "opus" and self.version >= (4, 5))

    @property
    def max_effort(self) -> bool:
        """Whether the ``max`` effort is accepted."""
        return self.major >= 5 or (self.tier == "opus" and self.version >= (4, 6))

    @property
    def structured_outputs(self) -> bool:
        """Whether JSON-schema output (``output_config.format``) and strict tools exist."""
        return self.major >= 4

    @property
    def min_cache_tokens(self) -> int:
        """The smallest prefix (in tokens) the API caches."""
        if self.tier in ("opus", "haiku") and self.version >= (4, 5):
            return 4096
        if self.tier == "haiku" and self.major == 3:
            return 2048
        return 1024


# Names pollux cannot parse behave as a current model: thinking with budgets, 16k output.
_UNKNOWN = ModelFamily(tier="unknown", major=4, minor=0)


@lru_cache(maxsize=64)
def family(model: str | None) -> ModelFamily:
    """The family of ``model`` (a current-generation default for names pollux cannot parse)."""
    name = (model or "").lower()
    match = _MODERN.match(name)
    if match and not match.group(1).isdigit():
        return ModelFamily(
            tier=match.group(1), major=int(match.group(2)), minor=int(match.group(3) or 0)
        )
    match = _LEGACY.match(name)
    if match:
        return ModelFamily(
            tier=match.group(3), major=int(match.group(1)), minor=int(match.group(2) or 0)
        )
    return _UNKNOWN
