"""Signatures on thinking blocks, so a tampered or invented block sent back is refused.

The key is fixed, so a block issued by one emulator verifies in another (a conversation saved as
JSON and resumed in a new process keeps working, as it does against the real API).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

__all__ = ["redacted_data", "sign_thinking", "valid_redacted", "valid_signature"]

_KEY = b"pollux-emulator-thinking-v1"


def _mac(kind: bytes, payload: str) -> str:
    digest = hmac.new(_KEY, kind + b"\x00" + payload.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def sign_thinking(thinking: str) -> str:
    """The signature the emulator issues for a thinking block with this text."""
    return "EmuSig" + _mac(b"thinking", thinking)


def valid_signature(thinking: str, signature: object) -> bool:
    """Whether ``signature`` is the one issued for ``thinking``."""
    return isinstance(signature, str) and hmac.compare_digest(signature, sign_thinking(thinking))


def redacted_data(text: str) -> str:
    """The opaque ``data`` of a redacted thinking block (carries its own signature)."""
    payload = json.dumps({"t": text, "s": _mac(b"redacted", text)}, separators=(",", ":"))
    return base64.b64encode(payload.encode()).decode()


def valid_redacted(data: object) -> bool:
    """Whether ``data`` is a redacted thinking payload the emulator issued, unchanged."""
    if not isinstance(data, str):
        return False
    try:
        payload = json.loads(base64.b64decode(data, validate=True))
        text, mac = payload["t"], payload["s"]
    except (ValueError, KeyError, TypeError):
        return False
    return (
        isinstance(text, str)
        and isinstance(mac, str)
        and hmac.compare_digest(mac, _mac(b"redacted", text))
    )
