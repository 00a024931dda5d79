"""A local input-token estimator for OpenAI payloads (``pip install "pollard[tiktoken]"``).

``OpenAITokenEstimator`` counts the tokens of every string in the payload (except routing fields
such as ``model``) with tiktoken, plus a fixed overhead per message, and each image part at the
most one image costs on the model (an image is billed by its tiles or patches, not by its data
URL's characters). It is an approximation: tool schemas and provider-added instructions are not
counted exactly, which is why a refusal caused by an estimate is recorded with
``"estimated": "true"``.

tiktoken downloads its encoding files on first use. The estimator loads the encoding lazily, on the
first estimate, and turns a failed download into an ``EstimatorUnavailable`` error with a hint; for
offline machines, point ``TIKTOKEN_CACHE_DIR`` at a directory holding the cached files, or pass an
already loaded ``encoding=``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from pollard.errors import PollardError

__all__ = ["DEFAULT_ENCODING", "EstimatorUnavailable", "OpenAITokenEstimator", "image_part_tokens"]

DEFAULT_ENCODING = "o200k_base"
"""The encoding used when the model is unknown to tiktoken (the GPT-4o and later family)."""

_SKIPPED_KEYS = frozenset(
    {"model", "_pollard", "stream", "stream_options", "store", "service_tier", "user", "metadata"}
)
_MESSAGE_LISTS = ("messages", "input")
# Image parts: Responses' ``input_image`` and Chat Completions' ``image_url``.
_IMAGE_PARTS = frozenset({"input_image", "image_url"})
# The most one image costs under OpenAI's published rules (December 2026): 512-px tiles, at most
# 8 of them (85 + 170 each, gpt-4o-mini 2,833 + 5,667 each), 85 at ``detail: "low"``; or, for
# the models that count 32-px patches, at most 1,536 patches times the model's multiplier.
# (The same rules, with an image's size, are `pollux.media_tokens.image_tokens`; pollard does
# not import pollux.)
# Patch models and their multipliers, in hundredths.
_PATCH_MODELS = (
    (re.compile(r"(?:^|/)(?:gpt-5(?:\.\d+)?|gpt-4\.1)-nano"), 246),
    (re.compile(r"(?:^|/)(?:gpt-5(?:\.\d+)?|gpt-4\.1)-mini"), 162),
    (re.compile(r"(?:^|/)o4-mini"), 172),
)
_4O_MINI = re.compile(r"(?:^|/)gpt-4o-mini")
_MAX_PATCHES = 1536
_MAX_TILES = 8


def image_part_tokens(model: str | None, detail: str | None = None) -> int:
    """The most one image part costs on an OpenAI ``model`` (its size is not read).

    Args:
        model: The model (``gpt-4o``, ``gpt-5-nano``, ``openai/gpt-4o-mini``), or None for the
            tile rule of the GPT-4o family.
        detail: The part's ``detail``; ``"low"`` is a fixed 85 tokens on tile models.

    Returns:
        Tokens, erring high.
    """
    name = (model or "").lower()
    for pattern, hundredths in _PATCH_MODELS:
        if pattern.search(name):
            return -(-_MAX_PATCHES * hundredths // 100)
    base, tile = (2833, 5667) if _4O_MINI.search(name) else (85, 170)
    return base if detail == "low" else base + tile * _MAX_TILES


class EstimatorUnavailable(PollardError):
    """The estimator cannot count tokens here (tiktoken missing, or its encoding not loadable)."""

    default_hint = (
        'install the extra (pip install "pollard[tiktoken]"), and on offline machines set '
        "TIKTOKEN_CACHE_DIR to a directory with the cached encoding files or pass encoding="
    )


class Encoding(Protocol):
    """The part of ``tiktoken.Encoding`` the estimator uses."""

    def encode_ordinary(self, text: str) -> list[int]:
        """Return the tokens of ``text`` (special tokens treated as text)."""
        ...


class OpenAITokenEstimator:
    """Estimates the input tokens of an OpenAI Responses or Chat Completions payload.

    Args:
        model: The model whose encoding to use; when None, the payload's ``model`` decides, and an
            unknown model falls back to ``o200k_base``.
        tokens_per_message: Overhead added for each message in ``messages`` or ``input``.
        encoding: An already loaded encoding (anything with ``encode_ordinary``). Skips tiktoken's
            lookup and download entirely.

    Example:
        >>> from pollard.meters import TokenMeter
        >>> meter = TokenMeter(OpenAITokenEstimator(), reserved_output_tokens=1024)
    """

    def __init__(
        self,
        model: str | None = None,
        tokens_per_message: int = 3,
        *,
        encoding: Encoding | None = None,
    ) -> None:
        if isinstance(tokens_per_message, bool) or not isinstance(tokens_per_message, int):
            raise TypeError("tokens_per_message must be an int")
        if tokens_per_message < 0:
            raise ValueError("tokens_per_message must be >= 0")
        self.model = model
        self.tokens_per_message = tokens_per_message
        self._fixed = encoding
        self._cache: dict[str, Encoding] = {}

    def __repr__(self) -> str:
        return (
            f"OpenAITokenEstimator(model={self.model!r}, "
            f"tokens_per_message={self.tokens_per_message})"
        )

    def encoding_for(self, model: str | None) -> Encoding:
        """Return the encoding for ``model`` (loaded once, then cached).

        Raises:
            EstimatorUnavailable: tiktoken is missing or cannot load the encoding (offline).
        """
        if self._fixed is not None:
            return self._fixed
        name = model or ""
        if name not in self._cache:
            self._cache[name] = _load(name)
        return self._cache[name]

    def estimate_input_tokens(self, payload: Any) -> int:
        """Return the estimated input tokens of ``payload``.

        Raises:
            EstimatorUnavailable: The encoding cannot be loaded.
        """
        model = self.model
        if model is None and isinstance(payload, Mapping):
            candidate = payload.get("model")
            model = candidate if isinstance(candidate, str) else None
        encoding = self.encoding_for(model)
        total = 0
        messages = 0
        stack: list[tuple[object, bool]] = [(payload, True)]
        while stack:
            value, top = stack.pop()
            if isinstance(value, str):
                total += len(encoding.encode_ordinary(value))
            elif isinstance(value, Mapping):
                if value.get("type") in _IMAGE_PARTS:
                    detail = value.get("detail")
                    nested = value.get("image_url")
                    if isinstance(nested, Mapping):  # Chat Completions: {"url", "detail"}
                        detail = nested.get("detail")
                    total += image_part_tokens(model, detail if isinstance(detail, str) else None)
                    continue
                for key, item in value.items():
                    if top and key in _SKIPPED_KEYS:
                        continue
                    if top and key in _MESSAGE_LISTS and isinstance(item, list):
                        messages += len(item)
                    stack.append((item, False))
            elif isinstance(value, (list, tuple)):
                stack.extend((item, False) for item in value)
        return total + messages * self.tokens_per_message


def _load(model: str) -> Encoding:
    try:
        import tiktoken
    except ImportError as exc:
        raise EstimatorUnavailable(
            'OpenAITokenEstimator needs tiktoken: pip install "pollard[tiktoken]"'
        ) from exc
    try:
        try:
            encoding: Encoding = tiktoken.encoding_for_model(model)
        except KeyError:
            encoding = tiktoken.get_encoding(DEFAULT_ENCODING)
    except EstimatorUnavailable:
        raise
    except Exception as exc:
        # tiktoken fetches encoding files over the network on first use; offline, that fails with
        # whatever the HTTP stack raises. Name the real cause and the way out.
        raise EstimatorUnavailable(
            f"tiktoken could not load the encoding for model {model or '(none)'!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return encoding
