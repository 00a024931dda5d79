"""The one secret scrubber: no API key survives into a message, hint, diagnostic or log line.

Servers and gateways echo credentials in their error bodies ("Incorrect API key provided:
sk-..."), and pollux quotes error bodies in its messages. Every string pollux builds from such
input passes through :func:`scrub`, which removes

- every secret registered with :func:`register_secret` (``Config`` registers its resolved
  ``api_key``, so the configured key is removed whatever its shape), and
- anything shaped like a credential: ``Bearer <token>``, ``sk-...`` / ``sk-ant-...`` /
  ``sk-or-...`` keys, Google ``AIza...`` keys, ``?key=...`` in URLs, and ``api_key=...`` /
  ``x-api-key: ...`` pairs.

It is applied where errors and outputs are built (:class:`pollux.errors.PolluxError`, the error
payload of an Output, structured-output failures, readiness messages and log lines), so a
provider added later inherits it.
"""

from __future__ import annotations

import contextlib
import re
import threading

__all__ = ["REDACTED", "register_secret", "scrub", "scrub_causes"]

REDACTED = "[REDACTED]"

# Shorter values are not worth the risk of mangling ordinary words ("local", "test").
_MIN_SECRET_LEN = 8
_MAX_SECRETS = 256

_lock = threading.Lock()
_secrets: dict[str, None] = {}  # insertion-ordered set; longest-first order is computed on use
_ordered: tuple[str, ...] = ()

# Credential-shaped tokens contain a digit (every provider's keys and JWTs do); requiring one keeps
# ordinary words ("Bearer authentication", "authorization: missing") out of the redaction.
_TOKEN = r"(?=[^\s\"',&;}]*\d)"
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"(?i)\b(bearer|basic)\s+{_TOKEN}[A-Za-z0-9._~+/=:-]{{8,}}"), rf"\1 {REDACTED}"),
    (re.compile(rf"\bsk-{_TOKEN}[A-Za-z0-9_*-]{{8,}}"), f"sk-{REDACTED}"),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{20,}"), REDACTED),
    # Query-string credentials (Gemini's ?key=..., proxies' ?token=...).
    (
        re.compile(rf"(?i)([?&](?:key|api_key|token|access_token)=){_TOKEN}[^&\s\"']{{8,}}"),
        rf"\1{REDACTED}",
    ),
    (
        re.compile(
            r"(?i)\b((?:x-)?(?:goog-)?api[_-]?key|access[_-]?token|authorization)"
            rf"(\"?'?\s*[:=]\s*\"?'?){_TOKEN}([^\s\"',&;}}]{{8,}})"
        ),
        rf"\1\2{REDACTED}",
    ),
)


def register_secret(value: str | None) -> None:
    """Remember ``value`` as a secret that :func:`scrub` removes from every string.

    Values shorter than 8 characters are ignored (they would match ordinary words). The
    registry is bounded; the oldest entries are dropped first.
    """
    global _ordered
    if not value or len(value) < _MIN_SECRET_LEN or value in _secrets:
        return
    with _lock:
        _secrets[value] = None
        while len(_secrets) > _MAX_SECRETS:
            _secrets.pop(next(iter(_secrets)))
        _ordered = tuple(sorted(_secrets, key=len, reverse=True))


def scrub(text: str) -> str:
    """Return ``text`` with registered secrets and credential-shaped tokens replaced."""
    if not text:
        return text
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def scrub_causes(error: BaseException) -> None:
    """Scrub the string arguments of the exceptions chained under ``error``, in place.

    A pollux error raised ``from`` an SDK's exception keeps that exception as its cause, and a
    printed traceback (``logging.exception``, an uncaught error) shows the cause's text, which
    quotes the server's error body as the SDK received it. Only the exceptions below ``error``
    are touched; pollux's own errors are scrubbed when they are built.
    """
    seen = {id(error)}
    current = error.__cause__ or error.__context__
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(isinstance(arg, str) for arg in current.args):
            # An exception type with read-only args keeps them.
            with contextlib.suppress(AttributeError, TypeError):
                current.args = tuple(
                    scrub(arg) if isinstance(arg, str) else arg for arg in current.args
                )
        current = current.__cause__ or current.__context__
