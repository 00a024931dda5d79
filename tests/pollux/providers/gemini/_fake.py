"""A scripted Gemini HTTP endpoint behind the real SDK (httpx MockTransport), for wire tests.

The official client serializes every request exactly as it would for Google; tests read the
recorded JSON bodies and script the JSON answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from pollux import Config, Session
from pollux.providers.gemini import GeminiProvider


def _camel_key(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def camel(value: Any, *, names: bool = False) -> Any:
    """``value`` with every key camelCased, except property names inside ``properties``."""
    if isinstance(value, list):
        return [camel(item) for item in value]
    if isinstance(value, dict):
        return {
            (key if names else _camel_key(key)): camel(item, names=key == "properties")
            for key, item in value.items()
        }
    return value


def usage(prompt: int = 10, candidates: int = 5, *, thoughts: int = 0, cached: int = 0) -> dict:
    data: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + thoughts,
    }
    if thoughts:
        data["thoughtsTokenCount"] = thoughts
    if cached:
        data["cachedContentTokenCount"] = cached
    return data


def reply(
    *parts: dict[str, Any],
    finish: str | None = "STOP",
    usage_: dict[str, Any] | None = None,
    response_id: str = "resp-1",
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}}
    if finish is not None:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": usage_ if usage_ is not None else usage(),
        "responseId": response_id,
        "modelVersion": "gemini-2.5-flash",
    }


@dataclass
class FakeGemini:
    """Answers in order from ``script`` (a dict, an ``httpx.Response`` or a callable)."""

    script: list[Any] = field(default_factory=list)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)

    def handler(self, request: httpx.Request) -> httpx.Response:
        raw = request.content
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        self.requests.append((request.method, request.url.path, body))
        answer = self.script.pop(0) if self.script else reply({"text": "ok"})
        if callable(answer):
            answer = answer(request, body)
        if isinstance(answer, httpx.Response):
            return answer
        if isinstance(answer, str):  # raw SSE text
            return httpx.Response(200, text=answer, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=answer)

    def bodies(self, suffix: str = ":generateContent") -> list[Any]:
        """Recorded JSON bodies, keys in camelCase (the SDK leaves some nested keys snake_case,
        which Google's JSON parser accepts as well)."""
        return [camel(body) for _, path, body in self.requests if path.endswith(suffix)]

    def client(self) -> Any:
        from google import genai
        from google.genai import types

        return genai.Client(
            api_key="test-key",
            http_options=types.HttpOptions(
                async_client_args={"transport": httpx.MockTransport(self.handler)},
                retry_options=types.HttpRetryOptions(attempts=1),
            ),
        )


def error(
    status: int, message: str, *, code_status: str, details: list[Any] | None = None
) -> httpx.Response:
    payload: dict[str, Any] = {"error": {"code": status, "message": message, "status": code_status}}
    if details:
        payload["error"]["details"] = details
    return httpx.Response(status, json=payload)


def sse(*events: dict[str, Any]) -> str:
    return "".join(f"data: {json.dumps(event)}\r\n\r\n" for event in events)


def session_with(
    fake: FakeGemini, config: Config, builder: Callable[..., Any] | None = None
) -> Session:
    """A Session whose gemini provider talks to ``fake`` through the real SDK."""
    session = Session(config)
    session._runtime()
    session._provider = GeminiProvider(config, client=fake.client())
    return session
