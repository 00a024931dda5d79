"""Redaction markers: plain and keyed digests, applied before hashing."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollard._core._canon import REDACT_DOMAIN, canonical_bytes, node_id
from pollard.redaction import contains_redaction, is_redacted, redact


def test_plain_digest_matches_the_v1_scheme() -> None:
    marker = redact("s3cret", "password")
    assert marker == {
        "__pollard_redacted": hashlib.sha256(REDACT_DOMAIN + b'"s3cret"').hexdigest(),
        "hint": "password",
    }
    assert is_redacted(marker)
    assert not is_redacted({"__pollard_redacted": "x"})


def test_keyed_digest_cannot_be_confirmed_without_the_key() -> None:
    keyed = redact("1234", key=b"k1")
    assert keyed["__pollard_redacted"].startswith("hmac-sha256:")
    assert keyed != redact("1234")
    assert keyed != redact("1234", key=b"k2")
    assert keyed == redact("1234", key=b"k1")
    with pytest.raises(ValueError):
        redact("x", key=b"")
    with pytest.raises(TypeError):
        redact("x", key="text")  # type: ignore[arg-type]


def test_contains_redaction_is_nested() -> None:
    assert contains_redaction({"a": [1, {"b": redact("x")}]})
    assert not contains_redaction({"a": [1, {"b": "x"}]})


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=20))
def test_redaction_before_hashing_keeps_plaintext_out_of_identity(text: str) -> None:
    secret = "SECRET-" + text
    parent = node_id("root", None, {"run": "r"})
    payload = {"tool": "send", "args": {"token": redact(secret, "token")}}
    assert b"SECRET-" not in canonical_bytes(payload)
    assert node_id("tool_call", parent, payload) == node_id(
        "tool_call", parent, {"tool": "send", "args": {"token": redact(secret, "token")}}
    )
