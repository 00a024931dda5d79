r"""Redaction: replace a value by a digest marker *before* it is hashed into a node identity.

The plaintext never reaches a store: the identity, the stored payload and every export carry
only the marker ``{"__pollard_redacted": "<digest>", "hint": <hint>}``. Equal values redact to equal
markers, so replay and hybrid lookups still match.

Without a key the digest is ``sha256(b"pollard/v1:redact\\n" + canonical(value))`` (as in pollard
0.8). A plain digest of a low-entropy secret (a PIN, a short password) can be found by hashing
guesses, so pass ``key=`` (bytes kept outside the store): the digest becomes
``"hmac-sha256:" + HMAC-SHA256(key, same bytes)``, which cannot be checked without the key.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from pollard._core._canon import REDACT_DOMAIN, JsonValue, canonical_bytes

__all__ = ["REDACTED_KEY", "contains_redaction", "is_redacted", "redact"]

REDACTED_KEY = "__pollard_redacted"
_HMAC_PREFIX = "hmac-sha256:"


def redact(
    value: JsonValue, hint: str | None = None, *, key: bytes | None = None
) -> dict[str, Any]:
    """Return the redaction marker for ``value``.

    Args:
        value: Any canonical JSON value (the secret).
        hint: A short, non-secret label kept next to the digest (for example ``"api token"``).
        key: Optional HMAC key. With a key, the digest cannot be confirmed by guessing values.

    Returns:
        ``{"__pollard_redacted": digest, "hint": hint}``.

    Raises:
        TypeError: If ``value`` is not canonical JSON, ``hint`` is not a str or None, or ``key`` is
            not bytes.
        ValueError: If ``key`` is empty.

    Example:
        >>> marker = redact("s3cret", "password")
        >>> is_redacted(marker)
        True
    """
    if hint is not None and not isinstance(hint, str):
        raise TypeError(f"hint must be a str or None, not {type(hint).__name__}")
    material = REDACT_DOMAIN + canonical_bytes(value)
    if key is None:
        digest = hashlib.sha256(material).hexdigest()
    else:
        if not isinstance(key, (bytes, bytearray)):
            raise TypeError(f"key must be bytes, not {type(key).__name__}")
        if not key:
            raise ValueError("key must not be empty")
        digest = _HMAC_PREFIX + hmac.new(bytes(key), material, hashlib.sha256).hexdigest()
    return {REDACTED_KEY: digest, "hint": hint}


def is_redacted(value: object) -> bool:
    """Return True when ``value`` is exactly a redaction marker."""
    return (
        isinstance(value, dict)
        and set(value) == {REDACTED_KEY, "hint"}
        and isinstance(value[REDACTED_KEY], str)
        and (value["hint"] is None or isinstance(value["hint"], str))
    )


def contains_redaction(value: object) -> bool:
    """Return True when ``value`` or anything nested in it is a redaction marker (iterative)."""
    stack = [value]
    while stack:
        current = stack.pop()
        if is_redacted(current):
            return True
        if isinstance(current, dict):
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
    return False
