"""``cachedContents``: explicit context caches with a lifetime on the virtual clock.

A cache holds a prompt (contents, system instruction, tools, tool config) for one model. Below
the model's minimum cacheable size creation is refused with the real API's 400; a
``generateContent`` that names the cache counts its tokens as ``cachedContentTokenCount``; an
unknown, deleted or expired cache is Google's 403 ``CachedContent not found``.
"""

from __future__ import annotations

from typing import Any

from pollux.testing._emulator._core import Call
from pollux.testing._emulator._http import Outcome, json_response
from pollux.testing._emulator._model import prompt_tokens

from ._gemini_common import (
    GoogleError,
    body_of,
    invalid,
    page,
    parse_duration,
    parse_rfc3339,
    rfc3339,
)
from ._gemini_request import check_model, compile_generate
from ._gemini_state import DEFAULT_CACHE_TTL, GeminiCache, GeminiState

_FIELDS = ("contents", "systemInstruction", "tools", "toolConfig")


def not_found() -> GoogleError:
    """What the real API answers for an unknown, deleted or expired cache."""
    return GoogleError(403, "CachedContent not found (or permission denied)")


def cache_json(record: GeminiCache) -> dict[str, Any]:
    """The ``CachedContent`` resource (the prompt itself is never echoed, as on the API)."""
    out: dict[str, Any] = {
        "name": record.name,
        "model": (
            f"{record.prefix}publishers/google/models/{record.model}"
            if record.prefix
            else f"models/{record.model}"
        ),
        "createTime": rfc3339(record.created),
        "updateTime": rfc3339(record.updated),
        "expireTime": rfc3339(record.expires),
        "usageMetadata": {"totalTokenCount": record.tokens},
    }
    if record.display_name is not None:
        out["displayName"] = record.display_name
    return out


def _expiry(body: dict[str, Any], now: float, default: float | None) -> float | None:
    ttl = body.get("ttl")
    expire = body.get("expireTime")
    if ttl is not None and expire is not None:
        raise invalid("Only one of ttl and expire_time may be set.")
    if ttl is not None:
        seconds = parse_duration(ttl, "cached_content.ttl")
        if seconds <= 0:
            raise invalid("* CachedContent.ttl: ttl must be positive.\n")
        return now + seconds
    if expire is not None:
        when = parse_rfc3339(expire, "cached_content.expire_time")
        if when <= now:
            raise invalid("* CachedContent.expire_time: expire_time must be in the future.\n")
        return when
    return None if default is None else now + default


def create(call: Call) -> Outcome:
    """``POST cachedContents``."""
    state: GeminiState = call.state
    body = body_of(call)
    raw_model = body.get("model")
    if not isinstance(raw_model, str) or not raw_model:
        raise invalid("* CachedContent.model: model is required.\n")
    model = check_model(call.core, raw_model, "createCachedContent")
    prompt = {k: body[k] for k in _FIELDS if body.get(k) is not None}
    if not prompt.get("contents") and not prompt.get("systemInstruction"):
        raise invalid("* CachedContent.contents: contents or system_instruction is required.\n")
    compiled = compile_generate(
        call.core,
        state,
        model,
        {
            **prompt,
            "contents": prompt.get("contents") or [{"role": "user", "parts": [{"text": ""}]}],
        },
        "cached_content.",
    )
    tokens = len(prompt_tokens(compiled.request.prompt))
    minimum = state.min_cache_tokens(model)
    if tokens < minimum:
        raise invalid(
            f"Cached content is too small. total_token_count={tokens}, "
            f"min_total_token_count={minimum}"
        )
    now = call.core.clock.now()
    expires = _expiry(body, now, DEFAULT_CACHE_TTL)
    assert expires is not None
    display = body.get("displayName")
    record = GeminiCache(
        call.core.new_id(""),
        model,
        display if isinstance(display, str) else None,
        now,
        now,
        expires,
        tokens,
        compiled.request,
        location_prefix(call),
    )
    state.caches[record.id] = record
    return json_response(cache_json(record))


def location_prefix(call: Call) -> str:
    """``projects/{p}/locations/{l}/`` for a Vertex AI path, ``""`` for the Gemini API."""
    project, location = call.params.get("project"), call.params.get("location")
    return f"projects/{project}/locations/{location}/" if project and location else ""


def _record(call: Call) -> GeminiCache:
    state: GeminiState = call.state
    record = state.live_cache(call.params["cache_id"])
    if record is None or record.prefix != location_prefix(call):
        raise not_found()
    return record


def get(call: Call) -> Outcome:
    """``GET cachedContents/{id}``."""
    return json_response(cache_json(_record(call)))


def update(call: Call) -> Outcome:
    """``PATCH cachedContents/{id}``: only the lifetime (``ttl`` or ``expireTime``) changes."""
    record = _record(call)
    body = body_of(call)
    others = sorted(set(body) - {"ttl", "expireTime", "name"})
    if others:
        raise invalid(
            f"Only ttl and expire_time of a CachedContent can be updated; got {', '.join(others)}."
        )
    now = call.core.clock.now()
    expires = _expiry(body, now, None)
    if expires is None:
        raise invalid("* UpdateCachedContentRequest: one of ttl or expire_time is required.\n")
    record.expires = expires
    record.updated = now
    return json_response(cache_json(record))


def delete(call: Call) -> Outcome:
    """``DELETE cachedContents/{id}``."""
    record = _record(call)
    del call.state.caches[record.id]
    return json_response({})


def list_caches(call: Call) -> Outcome:
    """``GET cachedContents`` (paged)."""
    state: GeminiState = call.state
    prefix = location_prefix(call)
    records = [
        r
        for r in (state.live_cache(i) for i in list(state.caches))
        if r is not None and r.prefix == prefix
    ]
    return json_response(page(call, records, cache_json, "cachedContents", 10))
