"""Behind a real gateway (the LiteLLM proxy), scripted in the emulator as it answered: a stream
request answered with one plain JSON body, and Gemini paths of the wrong API version."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import pollux
from pollux import APIError, Config, Environment, Input
from pollux.testing import Emulator, ErrorResponse, RawResponse, RecordedRequest

# What each wire's plain (non-streamed) answer looks like: what the gateway sent back.
PLAIN: dict[str, dict[str, Any]] = {
    "anthropic": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [{"type": "text", "text": "plain answer"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 2},
    },
    "openai": {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "gpt-5-nano",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "plain answer", "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
    },
    "gemini": {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "plain answer"}]},
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7},
    },
}
MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-5-nano", "gemini": "gemini-2.5-flash"}


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url("anthropic"))
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", emulator.base_url("gemini"))
        monkeypatch.delenv("GOOGLE_GENAI_API_VERSION", raising=False)
        yield emulator


@pytest.mark.parametrize("provider", ["anthropic", "openai", "gemini"])
async def test_a_stream_answered_with_a_plain_json_body_is_a_malformed_response(
    emu: Emulator, provider: str
) -> None:
    emu.script(provider, RawResponse(PLAIN[provider]), RawResponse(PLAIN[provider]))
    config = Config(provider=provider, model=MODELS[provider], api_key="k")  # type: ignore[arg-type]
    with pytest.raises(APIError) as info:
        async for _ in pollux.stream(Environment(), Input("Hi?"), config=config):
            pass
    error = info.value
    assert "answered with a plain application/json body" in error.message
    assert "text/event-stream" in error.message
    assert "broke" not in error.message and "cut" not in (error.hint or "")
    assert error.retryable is False and error.error_category == "malformed_response"
    assert "stream()" in (error.hint or "")
    assert len(emu.requests) == 1  # not retried as a broken connection


# -- Gemini behind LiteLLM ----------------------------------------------------------------------


def _litellm(request: RecordedRequest) -> Any:
    """LiteLLM's Gemini route: only v1beta paths; /v1/models is its OpenAI-style listing."""
    if "/gemini/v1beta/" in request.path:
        return None  # served
    if request.method == "GET" and "/models" in request.path:
        return RawResponse({"object": "list", "data": [{"id": "gemini-2.5-flash"}]})
    return ErrorResponse(405, body={"detail": "Method Not Allowed"})


async def test_gemini_on_the_wrong_api_version_names_the_url_and_the_version(
    emu: Emulator,
) -> None:
    emu.on("gemini", _litellm)
    config = Config(provider="gemini", model="gemini-2.5-flash", api_key="k")
    readiness = await pollux.check_ready(config)
    assert not readiness.ready and readiness.status_code == 405
    assert f"{emu.base_url('gemini')}/v1" in readiness.message
    assert "GOOGLE_GENAI_API_VERSION" in readiness.message
    emu.clear_requests()
    with pytest.raises(APIError) as info:
        await pollux.run("Hi?", config=config)
    hint = info.value.hint or ""
    assert f"The server at {emu.base_url('gemini')} refused the method on the v1 API" in hint
    assert "GOOGLE_GENAI_API_VERSION" in hint and "offending field" not in hint
    assert len(emu.requests) == 1  # a wrong path is not retried


async def test_gemini_with_the_gateways_api_version_is_ready_and_answers(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    emu.on("gemini", _litellm)
    monkeypatch.setenv("GOOGLE_GENAI_API_VERSION", "beta")
    config = Config(provider="gemini", model="gemini-2.5-flash", api_key="k")
    readiness = await pollux.check_ready(config)
    assert readiness.ready, readiness.message
    assert readiness.message.endswith(f"at {emu.base_url('gemini')}/v1beta")
    answer = await pollux.run("Hi?", config=config)
    assert answer.text == "Emulated reply to: Hi?"
    assert {r.path.split("/models/")[0] for r in emu.requests} == {"/gemini/v1beta"}
