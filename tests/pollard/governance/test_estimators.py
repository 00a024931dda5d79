"""OpenAITokenEstimator: counted with an injected encoding; tiktoken's download never attempted."""

from __future__ import annotations

from typing import Any

import pytest
import tiktoken

from pollard.estimators.openai import EstimatorUnavailable, OpenAITokenEstimator
from pollard.meters import TokenMeter


class WordEncoding:
    """One token per whitespace-separated word: easy to count by hand."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.seen.append(text)
        return list(range(len(text.split())))


def test_counts_string_leaves_plus_message_overhead_and_skips_routing_fields() -> None:
    encoding = WordEncoding()
    estimator = OpenAITokenEstimator(encoding=encoding, tokens_per_message=3)
    payload = {
        "model": "gpt-5.5 should not count",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "summarize this invoice"}]},
        ],
        "_pollard": {"provider": "openai words"},
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
    }
    # roles: 1 + 1, contents: 2 + 3, "text" type tag: 1, two messages: 2 * 3 overhead
    assert estimator.estimate_input_tokens(payload) == 1 + 1 + 2 + 3 + 1 + 6
    assert "gpt-5.5 should not count" not in encoding.seen
    assert "openai words" not in encoding.seen


def test_responses_input_string_counts_without_message_overhead() -> None:
    estimator = OpenAITokenEstimator(encoding=WordEncoding())
    assert estimator.estimate_input_tokens({"model": "m", "input": "one two three"}) == 3


def test_encoding_is_resolved_once_per_model(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def encoding_for_model(model: str) -> Any:
        calls.append(model)
        if model == "unknown-model":
            raise KeyError(model)
        return WordEncoding()

    monkeypatch.setattr(tiktoken, "encoding_for_model", encoding_for_model)
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: calls.append(name) or WordEncoding())
    estimator = OpenAITokenEstimator()
    for _ in range(3):
        assert estimator.estimate_input_tokens({"model": "gpt-4o", "input": "a b"}) == 2
    estimator.estimate_input_tokens({"model": "unknown-model", "input": "a"})
    assert calls == ["gpt-4o", "unknown-model", "o200k_base"]


def test_offline_download_failure_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(_name: str) -> Any:
        raise ConnectionError("network is unreachable")

    monkeypatch.setattr(tiktoken, "encoding_for_model", offline)
    estimator = OpenAITokenEstimator(model="gpt-4o")
    with pytest.raises(EstimatorUnavailable, match="network is unreachable") as info:
        estimator.estimate_input_tokens({"input": "x"})
    assert info.value.hint is not None and "TIKTOKEN_CACHE_DIR" in info.value.hint


def test_token_meter_precheck_uses_estimate_plus_reservation() -> None:
    meter = TokenMeter(OpenAITokenEstimator(encoding=WordEncoding()), reserved_output_tokens=100)
    assert meter.precheck_is_estimate
    assert meter.precheck_estimate("model_call", {"model": "m", "input": "a b c"}) == 103


@pytest.mark.parametrize("bad", [True, -1, 1.5])
def test_tokens_per_message_is_validated(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        OpenAITokenEstimator(tokens_per_message=bad)


class CharEncoding:
    """A token per four characters, as tiktoken roughly counts base64."""

    def encode_ordinary(self, text: str) -> list[int]:
        return list(range(len(text) // 4))


def test_an_image_part_counts_what_one_image_costs_not_its_data_url() -> None:
    # A 300 KB photo as a data URL is 400,000 characters: 100,000 "tokens" as text, which made
    # a hard token budget refuse it; OpenAI bills its tiles (at most 1,445 on gpt-4o).
    data_url = "data:image/png;base64," + "A" * 400_000
    estimator = OpenAITokenEstimator(encoding=CharEncoding(), tokens_per_message=0)
    responses = {
        "model": "gpt-4o",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is in it"},
                    {"type": "input_image", "image_url": data_url, "detail": "auto"},
                ],
            }
        ],
    }
    # + "user", "input_text" and the question at four characters a token: 1 + 2 + 3
    assert estimator.estimate_input_tokens(responses) == 1_445 + 6
    chat = {
        "model": "gpt-5-nano",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": data_url, "detail": "low"}}],
            }
        ],
    }
    # A patch model bills patches whatever the detail: at most 1,536 x 2.46.
    assert estimator.estimate_input_tokens(chat) == 3_779 + 1  # + "user"
    chat["model"] = "gpt-4o-mini"
    assert estimator.estimate_input_tokens(chat) == 2_833 + 1  # low detail: the base only
