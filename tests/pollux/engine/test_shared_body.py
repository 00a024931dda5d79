"""Request bodies that splice a fan-out's shared source text in once (``_body_json``).

The SDK providers' direct path (OpenAI Responses, Anthropic Messages, Gemini generateContent)
escapes a large string it has already sent once, then splices the escaped form into later
bodies. The bytes must be exactly what ``json.dumps`` gives, whatever the text holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from pollux import Config, Environment, RetryPolicy, Session, Source
from pollux.providers import _body_json
from pollux.providers._body_json import BodyEncoder
from pollux.testing import Emulator

# Quotes, backslashes, control characters, non-ASCII and astral characters, NUL: everything
# JSON escapes, repeated past the splicing threshold.
TRICKY = 'He said "hi"\\ \n\t\x00\x1f café ☕ 𝄞 ' * 200


def _plain(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def test_bodies_are_exactly_json_dumps_before_and_after_splicing() -> None:
    encoder = BodyEncoder()
    shared = TRICKY
    bodies = [
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": shared}, f"Q{i}"]},
            ],
            "system": (shared, {"nested": [shared, 1, 2.5, None, True]}),
            "max_tokens": 16,
        }
        for i in range(4)
    ]
    for body in bodies:
        assert encoder.encode(body) == _plain(body)
    # By the second body the text was remembered: later bodies spliced it, several times each.
    assert [text for text, _ in encoder._escaped.values()] == [shared]


def test_short_and_unshared_strings_are_not_remembered() -> None:
    encoder = BodyEncoder()
    short = "x" * (_body_json.MIN_CHARS - 1)
    for i in range(3):
        body = {"a": short, "b": f"{i}" * _body_json.MIN_CHARS}
        assert encoder.encode(body) == _plain(body)
    assert not encoder._escaped


def test_memory_is_bounded_by_count_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    encoder = BodyEncoder()
    texts = [f"{i:04d}" * 2000 for i in range(100)]  # 8,000 characters each
    for text in texts:
        for _ in range(2):
            assert encoder.encode([text]) == _plain([text])
    assert len(encoder._seen) <= _body_json._SEEN_MAX
    assert len(encoder._escaped) <= _body_json._ESCAPED_MAX
    monkeypatch.setattr(_body_json, "_ESCAPED_MAX_BYTES", 20_000)
    small = BodyEncoder()
    for text in texts[:5]:
        small.encode([text])
        small.encode([text])
    assert small._escaped_bytes <= 20_000
    # The oldest went first: the two newest fit.
    assert [t for t, _ in small._escaped.values()] == [texts[3], texts[4]]


# -- through every SDK provider's direct path, against the emulator ---------------------------


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url("anthropic"))
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", emulator.base_url("gemini"))
        yield emulator


CASES = {
    "openai": ("gpt-5-nano", "openai.responses.create"),
    "anthropic": ("claude-haiku-4-5", "anthropic.messages.create"),
    "gemini": ("gemini-2.5-flash", "gemini.generate"),
}


@pytest.mark.parametrize("provider", sorted(CASES))
async def test_every_request_of_a_fan_out_carries_the_source_exactly(
    emu: Emulator, provider: str
) -> None:
    model, endpoint = CASES[provider]
    config = Config(
        provider=provider,  # type: ignore[arg-type]
        model=model,
        api_key="test-key",
        retry=RetryPolicy(max_attempts=1),
        request_concurrency=2,
    )
    env = Environment(
        sources=[Source.from_text(TRICKY)], cache="none" if provider == "anthropic" else None
    )
    prompts = [f"Question {i}?" for i in range(5)]
    async with Session(config) as session:
        result = await session.run_many(prompts, environment=env)
        # The splice was in play (so the bodies below went through it), not only json.dumps.
        encoder = session._provider._direct._encoder  # type: ignore[union-attr]
        assert [text for text, _ in encoder._escaped.values()] == [TRICKY]
    assert result.status == "ok"
    sent = [json.dumps(r.json, ensure_ascii=False) for r in emu.requests_for(endpoint)]
    assert len(sent) == len(prompts)
    needle = json.dumps(TRICKY, ensure_ascii=False)
    for prompt in prompts:
        (body,) = [b for b in sent if prompt in b]
        assert needle in body
