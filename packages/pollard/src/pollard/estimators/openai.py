"""A local input-token estimator for OpenAI payloads (``pip install "pollard[tiktoken]"``).

``OpenAITokenEstimator`` counts the tokens of every string in the payload (except routing fields
such as ``model``) with tiktoken, plus a fixed overhead per message. It is an approximation: images,
tool schemas and provider-added instructions are not counted exactly, which is why a refusal caused
by an estimate is recorded with ``"estimated": "true"``.

tiktoken downloads its encoding files on first use. The estimator loads the encoding lazily, on the
first estimate, and turns a failed download into an ``EstimatorUnavailable`` error with a hint; for
offline machines, point ``TIKTOKEN_CACHE_DIR`` at a directory holding the cached files, or pass an
already loaded ``encoding=``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pollard.errors import PollardError

__all__ = ["DEFAULT_ENCODING", "EstimatorUnavailable", "OpenAITokenEstimator"]

DEFAULT_ENCODING = "o200k_base"
"""The encoding used when the model is unknown to tiktoken (the GPT-4o and later family)."""

_SKIPPED_KEYS = frozenset(
    {"model", "_pollard", "stream", "stream_options", "store", "service_tier", "user", "metadata"}
)
_MESSAGE_LISTS = ("messages", "input")


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
