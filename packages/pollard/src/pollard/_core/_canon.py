r"""Canonical JSON and the ``pollard/v1`` identity scheme (pure, standard library only).

Two serialisations exist on purpose:

* **canonical bytes** feed node identity. For every value pollard 0.8 accepts (None, str, bool,
  int, list, dict with str keys) they are byte-identical to 0.8: Python's ``json.dumps`` with sorted
  keys, compact separators and ``ensure_ascii=False``, encoded as UTF-8. 0.8 rejects floats; we
  accept finite floats and write them in the ECMAScript ``Number.prototype.toString`` form used by
  RFC 8785 (shortest round-trip digits; ``1.0`` is written ``1``, ``1e-7`` is ``1e-7``,
  ``1e21`` is ``1e+21``, ``-0.0`` is ``0``). So ``temperature=0.2`` can be part of an identity, and
  an integral float has the identity of the equal integer. NaN and infinities are rejected.
* **storage text** keeps the value as given (floats written by ``repr``) so a stored payload reads
  back with its original types. Without floats the two forms are the same text, computed once.

Node id: ``sha256(b"pollard/v1\\n" + canonical({"a": attempt, "k": kind, "p": parent or "",
"pl": payload}))`` as lowercase hex. Results, digests of results and meta are not part of the id.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeAlias

__all__ = [
    "IDENTITY_DOMAIN",
    "REDACT_DOMAIN",
    "RESULT_DOMAIN",
    "SEAL_DOMAIN",
    "JsonValue",
    "canonical_bytes",
    "fast_loads",
    "float_text",
    "identity_bytes",
    "is_hex64",
    "json_text",
    "make_dumps",
    "node_id",
    "payload_digest",
    "payload_forms",
    "result_digest",
    "result_text",
    "validate_json",
]

JsonValue: TypeAlias = Any
"""A JSON value: None, str, bool, int, float, list, or dict with str keys (documentation alias)."""

IDENTITY_DOMAIN = b"pollard/v1\n"
RESULT_DOMAIN = b"pollard/v1:result\n"
REDACT_DOMAIN = b"pollard/v1:redact\n"
SEAL_DOMAIN = b"pollard/v1:seal\n"

_HEX = frozenset("0123456789abcdef")
# The same escaping json.dumps(ensure_ascii=False) uses.
_encode_str = json.encoder.encode_basestring


def _reject(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON")


def make_dumps(default: Callable[[object], object] = _reject) -> Callable[[object], str]:
    """Return a JSON encoder built once: sorted keys, compact, UTF-8 text, NaN rejected.

    The result equals ``json.dumps(value, sort_keys=True, separators=(",", ":"),
    ensure_ascii=False, allow_nan=False, default=default)``. ``JSONEncoder.encode`` rebuilds its C
    encoder on every call; building it once halves the cost of the small documents written on
    every step. Without the C accelerator it falls back to the pure-Python encoder.
    """
    c_make = getattr(json.encoder, "c_make_encoder", None)
    if c_make is None:  # pragma: no cover - CPython always has the accelerator
        return json.JSONEncoder(
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            default=default,
        ).encode
    encoder = c_make(None, default, _encode_str, None, ":", ",", True, False, False)

    def dumps(value: object) -> str:
        return "".join(encoder(value, 0))

    return dumps


_dumps = make_dumps()
_scan_once: Callable[[str, int], tuple[Any, int]] = json.decoder.JSONDecoder().scan_once  # type: ignore[attr-defined]


def fast_loads(text: str) -> Any:
    """Parse JSON text written by this module (no surrounding whitespace).

    It skips ``json.loads``'s wrapper layers; malformed text goes through ``json.loads`` for its
    error.
    """
    try:
        value, end = _scan_once(text, 0)
    except StopIteration:
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value


def is_hex64(value: object) -> bool:
    """Return True when ``value`` is a 64-character lowercase hex string (a sha256 digest)."""
    return isinstance(value, str) and len(value) == 64 and _HEX.issuperset(value)


def float_text(value: float) -> str:
    """Return the canonical text of a finite float (ECMAScript / RFC 8785 number form).

    Args:
        value: A finite float.

    Returns:
        The shortest round-trip decimal form, as ECMAScript's ``Number.toString`` writes it.

    Raises:
        ValueError: If ``value`` is NaN or infinite.
    """
    if not math.isfinite(value):
        raise ValueError(f"{value!r} has no canonical JSON form")
    if value == 0:
        return "0"
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exp = int(exponent) + (len(digit_tuple) - len(digits))
    k = len(digits)
    n = exp + k  # value = 0.d1...dk * 10**n
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
        text = f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
    return "-" + text if sign else text


#: How deep a recorded value may nest. Every reader (the store's JSON parser, the canonical
#: encoder, verify) recurses once per level, and Python stops near 1,000 levels, so a deeper
#: value would be written and then unreadable; it is refused when it is recorded instead.
MAX_DEPTH = 512


def _validate(value: object, path: str, depth: int = 0) -> bool:
    """Check that ``value`` is canonicalisable; return True when it contains a float."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return False
    if depth >= MAX_DEPTH:
        raise TypeError(
            f"{path[:40]}...: nested deeper than {MAX_DEPTH} levels, more than pollard records "
            "(flatten the value, or record a digest of it)"
        )
    if kind is dict:
        found = False
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                raise TypeError(f"{path}: dict keys must be str, not {type(key).__name__}")
            if _validate(item, f"{path}.{key}", depth + 1):
                found = True
        return found
    if kind is list:
        found = False
        for index, item in enumerate(value):  # type: ignore[arg-type]
            if _validate(item, f"{path}[{index}]", depth + 1):
                found = True
        return found
    if kind is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise TypeError(f"{path}: {value!r} is not a finite number")
        return True
    raise TypeError(
        f"{path}: {kind.__name__} is not canonical JSON (use None, str, bool, int, float, list, "
        "or dict with str keys)"
    )


def validate_json(value: object) -> bool:
    """Validate that ``value`` can be canonicalised.

    Args:
        value: Any object.

    Returns:
        True when the value contains at least one float.

    Raises:
        TypeError: Naming the ``$.path`` of the first value that is not canonical JSON.
    """
    return _validate(value, "$")


def _encode_canonical(value: object) -> str:
    if isinstance(value, str):
        return _encode_str(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, list):
        return "[" + ",".join(_encode_canonical(item) for item in value) + "]"
    assert isinstance(value, dict)
    return (
        "{"
        + ",".join(_encode_str(key) + ":" + _encode_canonical(value[key]) for key in sorted(value))
        + "}"
    )


def payload_forms(value: object) -> tuple[str, bytes]:
    """Return ``(storage_text, canonical_bytes)`` for a payload, validating it once.

    Raises:
        TypeError: If the value is not canonical JSON.
    """
    if _validate(value, "$"):
        return _dumps(value), _encode_canonical(value).encode("utf-8")
    text = _dumps(value)
    return text, text.encode("utf-8")


def canonical_bytes(value: object) -> bytes:
    """Return the canonical identity bytes of a JSON value.

    Args:
        value: None, str, bool, int, finite float, list, or dict with str keys (nested).

    Returns:
        UTF-8 bytes, identical to pollard 0.8 for every value without floats.

    Raises:
        TypeError: Naming the ``$.path`` of the first value that is not canonical JSON.
    """
    return payload_forms(value)[1]


def json_text(value: object) -> str:
    """Return the storage text of a JSON value (sorted keys, compact, floats kept as floats).

    Raises:
        TypeError: If the value is not canonical JSON.
    """
    return payload_forms(value)[0]


def identity_bytes(kind: str, parent: str | None, attempt: int, canonical_payload: bytes) -> bytes:
    """Return the bytes hashed into a node id (domain prefix included)."""
    # Keys in sorted order: "a" < "k" < "p" < "pl". kind and parent need no JSON escaping (an enum
    # value and hex), so the record is assembled without re-serialising the payload.
    return b"".join(
        (
            IDENTITY_DOMAIN,
            b'{"a":',
            str(attempt).encode("ascii"),
            b',"k":"',
            kind.encode("ascii"),
            b'","p":"',
            (parent or "").encode("ascii"),
            b'","pl":',
            canonical_payload,
            b"}",
        )
    )


def node_id(kind: str, parent: str | None, payload: object, attempt: int = 0) -> str:
    """Compute a ``pollard/v1`` node id.

    Args:
        kind: The node kind (``root``, ``model_call``, ``tool_call``, ``note``, ``refusal``).
        parent: The parent node id, or ``None`` for a root.
        payload: The identity payload.
        attempt: The attempt number (an int >= 0).

    Returns:
        The lowercase hex SHA-256 node id.

    Raises:
        TypeError: If the payload is not canonical JSON or ``attempt`` is not an int.
        ValueError: If ``attempt`` is negative or ``parent`` is not a node id.
    """
    _check_attempt(attempt)
    if parent is not None and not is_hex64(parent):
        raise ValueError(f"parent must be a 64-character lowercase hex node id, got {parent!r}")
    return hashlib.sha256(
        identity_bytes(kind, parent, attempt, canonical_bytes(payload))
    ).hexdigest()


def _check_attempt(attempt: object) -> None:
    if type(attempt) is not int:
        raise TypeError(f"attempt must be an int, not {type(attempt).__name__}")
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")


def payload_digest(payload: object) -> str:
    """Return ``sha256(canonical_bytes(payload))`` as hex (no domain prefix, as in 0.8)."""
    return hashlib.sha256(canonical_bytes(payload)).hexdigest()


_result_dumps = _dumps


def result_text(result: object) -> str:
    """Return the exact stored text of a result (sorted compact JSON; floats allowed, NaN not).

    Results are encoded as JSON text (tuples become lists, like ``json.dumps``); the digest and
    the stored result are computed from this text.

    Raises:
        TypeError: If the result holds a value JSON cannot encode, or nests too deeply.
        ValueError: If the result contains NaN or an infinity.
    """
    try:
        return _result_dumps(result)
    except RecursionError:
        raise TypeError(
            f"the result is nested deeper than pollard records (about {MAX_DEPTH} levels is "
            "the most every reader can read back): flatten it, or record a digest of it"
        ) from None


def result_digest(text: str) -> str:
    r"""Return the result digest: ``sha256(b"pollard/v1:result\\n" + text)`` as hex."""
    return hashlib.sha256(RESULT_DOMAIN + text.encode("utf-8")).hexdigest()
