"""The one secret scrubber: no API key survives into a message, hint, diagnostic or log line.

Servers and gateways echo credentials in their error bodies ("Incorrect API key provided:
sk-..."), and pollux quotes error bodies in its messages. Every string pollux builds from such
input passes through :func:`scrub`, which removes

- every secret registered with :func:`register_secret` (``Config`` registers its resolved
  ``api_key``, so the configured key is removed whatever its shape, for as long as any
  ``Config`` holding it is alive), and
- anything shaped like a credential: ``Bearer <token>``, ``sk-...`` / ``sk-ant-...`` /
  ``sk-or-...`` keys, Google ``AIza...`` keys, ``?key=...`` in URLs, and ``api_key=...`` /
  ``x-api-key: ...`` pairs.

It is applied where errors and outputs are built (:class:`pollux.errors.PolluxError`, the error
payload of an Output, structured-output failures, readiness messages and log lines), so a
provider added later inherits it.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import weakref

__all__ = [
    "REDACTED",
    "ScrubFilter",
    "install_log_filter",
    "register_secret",
    "scrub",
    "scrub_causes",
]

REDACTED = "[REDACTED]"

# Shorter values are not worth the risk of mangling ordinary words ("local", "test").
_MIN_SECRET_LEN = 8
# Secrets no live owner holds any more (and those registered without an owner) are kept for a
# while: strings quoting them may outlive the Config.
_MAX_RELEASED = 256

# RLock: a finalizer (_release) may run from garbage collection inside a locked section.
_lock = threading.RLock()
_live: dict[str, int] = {}  # secret -> how many live owners (Config objects) hold it
_released: dict[str, None] = {}  # insertion-ordered set, oldest first out
_ordered: tuple[str, ...] = ()  # longest first, rebuilt on use after a change
_dirty = False

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


def register_secret(value: str | None, owner: object | None = None) -> None:
    """Remember ``value`` as a secret that :func:`scrub` removes from every string.

    Values shorter than 8 characters are ignored (they would match ordinary words). A secret
    registered with an ``owner`` (``Config`` passes itself) stays registered for as long as any
    of its owners is alive, however many other secrets a process holds (one per tenant, say);
    afterwards, and for secrets registered without an owner, the last 256 are kept, oldest
    dropped first.
    """
    global _dirty
    if not value or len(value) < _MIN_SECRET_LEN:
        return
    with _lock:
        if owner is not None:
            if value not in _live and value not in _released:
                _dirty = True
            _live[value] = _live.get(value, 0) + 1
            _released.pop(value, None)
            weakref.finalize(owner, _release, value)
        elif value not in _live and value not in _released:
            _remember_released(value)


def _release(value: str) -> None:
    """One owner of ``value`` is gone; with the last one it joins the bounded released set."""
    with _lock:
        count = _live.get(value, 0) - 1
        if count > 0:
            _live[value] = count
            return
        _live.pop(value, None)
        _remember_released(value)


def _remember_released(value: str) -> None:
    global _dirty
    _released[value] = None
    while len(_released) > _MAX_RELEASED:
        _released.pop(next(iter(_released)))
    _dirty = True


def _secrets() -> tuple[str, ...]:
    global _ordered, _dirty
    if _dirty:
        with _lock:
            _ordered = tuple(sorted({*_live, *_released}, key=len, reverse=True))
            _dirty = False
    return _ordered


def scrub(text: str) -> str:
    """Return ``text`` with registered secrets and credential-shaped tokens replaced."""
    if not text:
        return text
    for secret in _secrets():
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


# -- third-party log records --------------------------------------------------------------------

#: The loggers whose records a pollux call causes: the HTTP stack and the provider SDKs. Their
#: DEBUG records quote request options, response headers and redirect locations, where a server
#: may echo the key.
LOGGER_PREFIXES = ("httpx", "httpcore", "openai", "anthropic", "google_genai", "google.genai")
#: Loggers created lazily (on first use), so they may not exist yet when pollux installs its
#: filter; creating them early is harmless (a logger without handlers propagates as before).
_KNOWN_LOGGERS = (
    *(
        f"{base}{suffix}"
        for base in ("httpcore", "httpcore2")  # httpcore2/httpx2: the copy Anthropic's SDK uses
        for suffix in ("", ".connection", ".http11", ".http2", ".proxy", ".socks")
    ),
    "httpx",
    "httpx2",
    "openai",
    "openai._base_client",
    "anthropic",
    "anthropic._base_client",
    "google_genai",
    "google_genai._api_client",
    "google_genai.models",
)


class ScrubFilter(logging.Filter):
    """A logging filter that scrubs a record's message (keeps the record, never drops one).

    A logger's filters see only the records created by that logger (not those of its children
    that propagate through it), so :func:`install_log_filter` adds one to each logger.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Replace secrets in the formatted message; always keep the record."""
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not format: left to the handler
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = ScrubFilter()
_filtered: set[str] = set()


def install_log_filter() -> None:
    """Add :class:`ScrubFilter` to the HTTP and SDK loggers that exist now (idempotent).

    Called when a Session builds its provider and after an SDK is imported, so the loggers of
    what pollux imports are covered. Records of other loggers (an application's own HTTP
    logging, a proxy library), a logger created later under another name, text an SDK prints
    itself, and a traceback attached to a record (``exc_info``) are not: pollux scrubs the
    exceptions it raises, not those a handler formats.
    """
    manager = logging.Logger.manager
    names = [
        *_KNOWN_LOGGERS,
        *(n for n in list(manager.loggerDict) if n.startswith(LOGGER_PREFIXES)),
    ]
    with _lock:
        for name in names:
            if name in _filtered:
                continue
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)
            _filtered.add(name)
