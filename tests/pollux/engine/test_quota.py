"""Provider quotas (`Config(quota=...)`): every attempt waits for room, holds, settles.

The emulator enforces a provider's rate limit (`EmulatorQuota`) and answers 429 with that
provider's headers, so each wire shows both sides: without a quota a burst draws 429s, with one
the same burst is paced and draws none.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pollux
from pollux import Config, ConfigurationError, LocalQuota, RetryPolicy
from pollux.media_tokens import image_tokens
from pollux.quota import QuotaRequest
from pollux.testing import Emulator, EmulatorQuota, ErrorResponse, Latency

MODELS = {
    "openai": "gpt-5-nano",
    "anthropic": "claude-haiku-4-5",
    "gemini": "gemini-2.5-flash",
    "openrouter": "openai/gpt-4o-mini",
    "local": "qwen3",
}
BASE_URL_VARS = {
    "openai": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
    "gemini": "GOOGLE_GEMINI_BASE_URL",
    "openrouter": "OPENROUTER_BASE_URL",
}
WINDOW_S = 0.3
MEDIA = Path(__file__).resolve().parent.parent / "media"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(models=list(MODELS.values())) as emulator:
        yield emulator


def config_for(emu: Emulator, wire: str, monkeypatch: pytest.MonkeyPatch, **extra: Any) -> Config:
    if wire == "local":
        return Config(provider="local", model=MODELS[wire], base_url=emu.base_url("local"), **extra)
    monkeypatch.setenv(BASE_URL_VARS[wire], emu.base_url(wire))
    return Config(provider=wire, model=MODELS[wire], api_key="test-key", **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize("wire", sorted(MODELS))
async def test_a_burst_is_paced_to_the_quota_and_draws_no_429(
    emu: Emulator, wire: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = [f"Question {i}?" for i in range(8)]
    base = config_for(emu, wire, monkeypatch, retry=RetryPolicy(max_attempts=1))
    emu.set_quota(wire, EmulatorQuota(requests=4, window_s=WINDOW_S))
    unpaced = await pollux.run_many(prompts, config=base)
    assert emu.rate_limited(wire) > 0
    assert any(o.diagnostics.error for o in unpaced.outputs)

    emu.set_quota(wire, EmulatorQuota(requests=4, window_s=WINDOW_S))
    quota = LocalQuota(requests_per_minute=4, window_s=WINDOW_S)
    paced = await pollux.run_many(prompts, config=dataclasses.replace(base, quota=quota))
    assert emu.rate_limited(wire) == 0
    assert [o.diagnostics.error for o in paced.outputs] == [None] * len(prompts)
    waits = [o.diagnostics.raw["quota"]["waited_s"] for o in paced.outputs]
    assert sum(1 for w in waits if w > 0) >= len(prompts) - 4  # the second half waited
    assert quota.in_flight == (0, 0)


async def test_a_stream_waits_for_the_quota_and_reports_the_wait(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A window longer than any scheduling delay between the two calls: with WINDOW_S (0.3 s)
    # a busy machine (the suite on every core) could start the stream after the window ended.
    window_s = 2.0
    quota = LocalQuota(requests_per_minute=1, window_s=window_s)
    config = config_for(emu, "openai", monkeypatch, quota=quota)
    emu.set_quota("openai", EmulatorQuota(requests=1, window_s=window_s))
    await pollux.run("first?", config=config)
    done = None
    async for event in pollux.stream(None, pollux.Input("second?"), config=config):
        if event.type == "done":
            done = event.output
    assert done is not None and done.diagnostics.error is None
    assert done.diagnostics.raw["quota"]["waited_s"] > 0
    assert emu.rate_limited("openai") == 0
    assert quota.in_flight == (0, 0)


class Recording:
    """A CallQuota that admits at once and records what the engine told it."""

    def __init__(self) -> None:
        self.requests: list[QuotaRequest] = []
        self.settled: list[int | None] = []
        self.paused: list[float] = []

    async def acquire(self, request: QuotaRequest) -> Recording:
        self.requests.append(request)
        self.waited_s = 0.0
        return self

    async def settle(self, tokens: int | None) -> None:
        self.settled.append(tokens)

    async def pause(self, request: QuotaRequest, seconds: float) -> None:
        self.paused.append(seconds)


async def test_each_attempt_holds_its_worst_case_and_settles_to_the_reported_tokens(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    quota = Recording()
    config = config_for(
        emu, "openai", monkeypatch, quota=quota, retry=RetryPolicy(max_attempts=2, jitter=False)
    )
    emu.script("openai.responses", ErrorResponse(429, retry_after=0.01))
    output = await pollux.run("What is the capital of France?", config=config, max_tokens=50)
    assert output.diagnostics.error is None
    # Two attempts: the 429 paused every caller for what the provider asked and used nothing;
    # the answer settled to what the provider reported.
    assert len(quota.requests) == 2
    assert quota.paused == [pytest.approx(0.01)]
    usage = output.usage
    assert quota.settled == [0, usage.input_tokens + usage.output_tokens]
    request = quota.requests[0]
    assert (request.provider, request.model) == ("openai", "gpt-5-nano")
    assert request.tokens == 50 + 16 + len("What is the capital of France?") // 4 + 1
    assert request.key_id is not None and "test-key" not in request.key_id


async def test_waiting_is_bounded_by_the_calls_deadline(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    quota = LocalQuota(requests_per_minute=1, window_s=30)
    config = config_for(emu, "openai", monkeypatch, quota=quota, retry=RetryPolicy(max_elapsed_s=1))
    await pollux.run("first?", config=config)
    second = await pollux.run_many(["second?"], config=config)
    error = second.outputs[0].diagnostics.error
    assert error is not None and error["error_category"] == "rate_limit"
    assert "quota" in error["message"] and "deadline" in error["message"]
    assert "max_elapsed_s" in error["hint"]
    assert len([r for r in emu.requests if r.route == "openai.responses.create"]) == 1


async def test_a_call_that_can_never_fit_is_refused_without_waiting(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    quota = LocalQuota(tokens_per_minute=100)
    config = config_for(emu, "openai", monkeypatch, quota=quota)
    outputs = await pollux.run_many(["Hi?"], config=config, max_tokens=500)
    error = outputs.outputs[0].diagnostics.error
    assert error is not None and error["error_category"] == "quota"
    assert "max_tokens" in error["hint"]
    assert emu.requests == []


async def test_media_its_bytes_put_above_the_token_limit_holds_the_window_not_refused(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 120 KB PDF is 30,000 tokens by its bytes (four per token), which may well overstate
    # what a provider counts: under a 20,000-token quota it was "never admitted". It now holds
    # the whole window and goes alone; the same bytes as text are still refused.
    pdf = pollux.Source.from_bytes(b"%PDF-1.7\n" + bytes(120_000), mime_type="application/pdf")
    text = pollux.Source.from_text("x" * 120_000)
    quota = LocalQuota(tokens_per_minute=20_000, window_s=WINDOW_S)
    config = config_for(emu, "openai", monkeypatch, quota=quota)
    outputs = await pollux.run_many(["One?", "Two?"], sources=[pdf], config=config, max_tokens=64)
    quotas = [output.diagnostics.raw["quota"] for output in outputs.outputs]
    assert all(output.diagnostics.error is None for output in outputs.outputs)
    assert [q["tokens_held"] for q in quotas] == [20_000, 20_000]  # the window, not 30,000+
    assert sum(q["waited_s"] > 0 for q in quotas) == 1  # one at a time: the other waited
    refused = await pollux.run_many(["Three?"], sources=[text], config=config, max_tokens=64)
    error = refused.outputs[0].diagnostics.error
    assert error is not None and error["error_category"] == "quota"
    assert "30,0" in error["message"] and "besides its media" not in error["message"]
    capped = await pollux.run_many(["Four?"], sources=[pdf], config=config, max_tokens=25_000)
    error = capped.outputs[0].diagnostics.error  # its output cap alone is above the limit
    assert error is not None and "besides its media" in error["message"]
    assert len([r for r in emu.requests if "files" not in r.route]) == 2  # the two answered


async def test_an_image_holds_what_the_provider_charges_for_its_pixels_not_its_bytes(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 1023 x 767 PNG padded to 300 KB was held as 75,000 tokens (its bytes at four per token)
    # and refused under a 20,000-token quota; gpt-5-nano counts it as 768 patches of 32 px.
    png = (MEDIA / "wide.png").read_bytes()
    photo = pollux.Source.from_bytes(png + bytes(300_000), mime_type="image/png")
    unread = pollux.Source.from_bytes(b"\x89PNG" + bytes(300_000), mime_type="image/png")
    remote = pollux.Source.from_uri("https://example.com/cat.png", mime_type="image/png")
    quota = LocalQuota(tokens_per_minute=20_000, window_s=WINDOW_S)
    config = config_for(emu, "openai", monkeypatch, quota=quota)
    held = []
    for source in (photo, unread, remote):
        output = await pollux.run_many(["Q?"], sources=[source], config=config, max_tokens=64)
        quota_seen = output.outputs[0].diagnostics.raw["quota"]
        held.append(quota_seen["tokens_held"])
    framing = held[0] - image_tokens("openai", "gpt-5-nano", (1023, 767))
    assert 64 < framing < 100  # the prompt, the framing and the output cap of 64
    assert image_tokens("openai", "gpt-5-nano", (1023, 767)) == math.ceil(32 * 24 * 2.46)
    # An image whose size is not read, and a remote one (counted as nothing before), hold
    # the most one image costs on the model.
    assert held[1] == held[2] == framing + image_tokens("openai", "gpt-5-nano") == framing + 3779


async def _two_calls_on_gemini(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, source: pollux.Source
) -> list[int]:
    """Two prompts over ``source`` under a 100,000-token quota: the tokens each held.

    Both must be answered at once, neither waiting for the other.
    """
    quota = LocalQuota(tokens_per_minute=100_000, window_s=30)
    config = config_for(emu, "gemini", monkeypatch, quota=quota)
    outputs = await pollux.run_many(
        ["One?", "Two?"], sources=[source], config=config, max_tokens=64
    )
    quotas = [output.diagnostics.raw["quota"] for output in outputs.outputs]
    assert all(output.diagnostics.error is None for output in outputs.outputs)
    assert [q["waited_s"] for q in quotas] == [0, 0]  # both fit the window at once
    return [q["tokens_held"] for q in quotas]


async def test_audio_holds_its_seconds_not_its_bytes(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Two minutes of 8 kHz audio is 960 KB: 240,000 tokens by its bytes, so under a
    # 100,000-token quota each call held the whole window and they went one at a time. Gemini
    # counts 32 tokens a second: 3,840.
    clip = tmp_path / "two-minutes.wav"
    with wave.open(str(clip), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(8000)
        out.writeframes(bytes(8000 * 120))
    held = await _two_calls_on_gemini(emu, monkeypatch, pollux.Source.from_file(clip))
    assert all(120 * 32 < tokens < 120 * 32 + 100 for tokens in held)


async def test_a_pdf_on_gemini_holds_its_pages_not_its_bytes(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A 20-page scan padded to 2 MB: 500,000 tokens by its bytes; Gemini counts 258 a page.
    pages = b"".join(
        b"%d 0 obj << /Type /Page /Parent 1 0 R >> endobj\n" % (i + 2) for i in range(20)
    )
    scan = tmp_path / "scan.pdf"
    scan.write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Pages /Count 20 >> endobj\n" + pages)
    with scan.open("ab") as out:
        out.write(bytes(2_000_000))
    held = await _two_calls_on_gemini(emu, monkeypatch, pollux.Source.from_file(scan))
    assert all(20 * 258 < tokens < 20 * 258 + 100 for tokens in held)


async def test_a_cancelled_call_leaves_nothing_in_flight(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    quota = LocalQuota(requests_per_minute=10, tokens_per_minute=100_000, window_s=WINDOW_S)
    config = config_for(emu, "openai", monkeypatch, quota=quota)
    emu.script("openai.responses", Latency(5))
    task = asyncio.create_task(pollux.run("slow?", config=config))
    while quota.in_flight == (0, 0):
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert quota.in_flight == (0, 0)


def test_a_quota_without_its_methods_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Config(provider="openai", model="gpt-5-nano", use_mock=True, quota=object())  # type: ignore[arg-type]
    assert "acquire" in str(caught.value)
    assert caught.value.hint is not None and "LocalQuota" in caught.value.hint


@pytest.mark.parametrize(
    "kwargs",
    [
        {"requests_per_minute": 0},
        {"tokens_per_minute": -1},
        {"requests_per_minute": True},
        {"window_s": 0},
        {"window_s": float("inf")},
        {"window_s": 86_401},  # a day at most: a window in milliseconds is a unit mistake
        {"default_output_tokens": 0},
    ],
)
def test_bad_quota_settings_are_configuration_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        LocalQuota(**kwargs)
    assert caught.value.hint


@pytest.mark.parametrize(
    ("quota", "message"),
    [
        ("60/min", "must be an EmulatorQuota, a mapping or None, got str"),
        ({"requests": 5, "rpm": 5}, "unknown keys: rpm"),
        # A reset date that far away cannot be written: the Anthropic 429 failed to build.
        ({"requests": 5, "window_s": 1e300}, "at most a day"),
        ({"requests": 0}, "must be >= 1"),
    ],
)
def test_the_emulator_refuses_a_quota_it_cannot_read(quota: Any, message: str) -> None:
    from pollux.testing import EmulatorError

    with pytest.raises(EmulatorError, match=message) as caught:
        Emulator(quotas={"openai": quota})
    assert caught.value.hint


@pytest.mark.parametrize(
    ("wire", "header"),
    [
        ("openai", "x-ratelimit-remaining-requests"),
        ("openrouter", "x-ratelimit-remaining-requests"),
        ("anthropic", "anthropic-ratelimit-requests-remaining"),
    ],
)
def test_the_emulators_429_carries_the_providers_rate_limit_headers(wire: str, header: str) -> None:
    import json
    import urllib.error
    import urllib.request

    paths = {"openai": "/responses", "openrouter": "/chat/completions", "anthropic": "/v1/messages"}
    with Emulator(quotas={wire: EmulatorQuota(requests=1, window_s=30)}) as emu:
        statuses = []
        for _ in range(2):
            request = urllib.request.Request(
                emu.base_url(wire) + paths[wire],
                data=json.dumps({"model": "m", "input": "hi", "max_tokens": 5}).encode(),
                headers={"content-type": "application/json", "authorization": "Bearer k"},
            )
            try:
                with urllib.request.urlopen(request) as answer:
                    statuses.append((answer.status, {}))
            except urllib.error.HTTPError as exc:
                statuses.append((exc.code, dict(exc.headers)))
        assert statuses[1][0] == 429
        headers = {k.lower(): v for k, v in statuses[1][1].items()}
        assert headers[header] == "0"
        assert int(headers["retry-after"]) >= 1


@pytest.mark.parametrize(
    ("wire", "headers"),
    [
        ("openai", {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m2s"}),
        ("openrouter", {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "62s"}),
        (
            "anthropic",
            {
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": "2099-01-01T00:00:00Z",
            },
        ),
    ],
)
async def test_a_429_without_retry_after_is_paced_by_the_providers_rate_limit_headers(
    emu: Emulator, wire: str, headers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    quota = Recording()
    config = config_for(emu, wire, monkeypatch, quota=quota, retry=RetryPolicy(max_attempts=1))
    route = {"openai": "responses", "openrouter": "chat", "anthropic": "messages.create"}[wire]
    emu.script(f"{wire}.{route}", ErrorResponse(429, headers=headers))
    outputs = await pollux.run_many(["Hi?"], config=config)
    error = outputs.outputs[0].diagnostics.error
    assert error is not None and error["error_category"] == "rate_limit"
    # Every caller of the quota pauses until the exhausted limit resets.
    assert len(quota.paused) == 1 and quota.paused[0] >= 61
