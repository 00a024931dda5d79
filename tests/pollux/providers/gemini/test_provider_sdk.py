"""The gemini provider through the real google-genai SDK, against a scripted HTTP endpoint.

Asserts on the JSON the SDK put on the wire and on the Outputs pollux built from the answers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pydantic
import pytest

from pollux import (
    Config,
    ConfigurationError,
    Continuation,
    Environment,
    Input,
    Message,
    RetryPolicy,
    Session,
    ToolCall,
    ToolDeclaration,
    ToolResult,
)

from ._fake import FakeGemini, error, reply, session_with, sse, usage

WEATHER = ToolDeclaration(
    name="get_weather",
    description="Weather for a city",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)


@pytest.fixture
def fake() -> FakeGemini:
    return FakeGemini()


def config(model: str = "gemini-2.5-flash", **kwargs: Any) -> Config:
    return Config(
        provider="gemini",
        model=model,
        api_key="test-key",
        retry=RetryPolicy(max_attempts=3, initial_delay_s=0.001, max_delay_s=0.002),
        **kwargs,
    )


@pytest.fixture
async def session(fake: FakeGemini) -> AsyncIterator[Session]:
    async with session_with(fake, config()) as s:
        yield s


async def test_text_usage_and_every_generation_option_on_the_wire(
    fake: FakeGemini, session: Session
) -> None:
    fake.script.append(
        reply(
            {"text": "Let me think.", "thought": True},
            {"text": "Blue."},
            usage_=usage(12, 3, thoughts=4, cached=8),
        )
    )
    out = (
        await session.run_many(
            "Sky colour?",
            instructions="Be terse.",
            temperature=0.2,
            top_p=0.9,
            max_tokens=64,
            seed=7,
            reasoning_budget_tokens=256,
        )
    ).outputs[0]
    assert out.text == "Blue."
    assert out.reasoning == "Let me think."
    assert out.usage.input_tokens == 12
    assert out.usage.output_tokens == 7  # candidates + thoughts
    assert out.usage.reasoning_tokens == 4 and out.usage.cached_tokens == 8
    assert out.metrics.finish_reason == "stop" and out.metrics.completion_status == "clean"
    (body,) = fake.bodies()
    assert body["systemInstruction"]["parts"] == [{"text": "Be terse."}]
    generation = body["generationConfig"]
    assert generation["temperature"] == 0.2 and generation["topP"] == 0.9
    assert generation["maxOutputTokens"] == 64 and generation["seed"] == 7
    assert generation["thinkingConfig"] == {"thinkingBudget": 256, "includeThoughts": True}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Sky colour?"}]}]


async def test_reasoning_effort_is_a_level_on_gemini_3_and_a_budget_on_2_5(
    fake: FakeGemini,
) -> None:
    async with session_with(fake, config("gemini-3-flash-preview")) as s3:
        await s3.run_many("Q", reasoning_effort="high")
    async with session_with(fake, config("gemini-2.5-flash")) as s25:
        await s25.run_many("Q", reasoning_effort="low")
    level, budget = (b["generationConfig"]["thinkingConfig"] for b in fake.bodies())
    assert level == {"thinkingLevel": "HIGH", "includeThoughts": True}
    assert budget == {"thinkingBudget": 1024, "includeThoughts": True}


async def test_effort_none_refused_on_gemini_3_before_io(fake: FakeGemini) -> None:
    async with session_with(fake, config("gemini-3-pro-preview")) as s:
        with pytest.raises(ConfigurationError) as info:
            await s.run_many("Q", reasoning_effort="none")
    assert info.value.hint and not fake.requests


@pytest.mark.parametrize(
    ("model", "options"),
    [
        ("gemini-2.5-pro", {"reasoning_budget_tokens": 0}),
        ("gemini-2.5-pro", {"reasoning_effort": "none"}),
        ("gemini-3-flash-preview", {"reasoning_budget_tokens": 0}),
    ],
)
async def test_thinking_off_refused_before_io_where_the_model_cannot(
    fake: FakeGemini, model: str, options: dict[str, Any]
) -> None:
    # Gemini 2.5 Pro and Gemini 3 models only work in thinking mode: the API answers 400
    # "Budget 0 is invalid"; pollux says so before sending anything.
    async with session_with(fake, config(model)) as s:
        with pytest.raises(ConfigurationError, match="cannot turn thinking off") as info:
            await s.run_many("Q", **options)
    assert "reasoning_budget_tokens" in (info.value.hint or "") and not fake.requests


async def test_thinking_off_is_sent_where_the_model_can(fake: FakeGemini) -> None:
    async with session_with(fake, config("gemini-2.5-flash")) as s:
        await s.run_many("Q", reasoning_budget_tokens=0)
    (body,) = fake.bodies()
    assert body["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 0


class Verdict(pydantic.BaseModel):
    label: str
    score: float | None = None


async def test_structured_output_sends_sanitized_json_schema(
    fake: FakeGemini, session: Session
) -> None:
    fake.script.append(reply({"text": '{"label": "spam", "score": 0.9}'}))
    out = (await session.run_many("Classify", output=Verdict)).outputs[0]
    assert out.structured == Verdict(label="spam", score=0.9)
    generation = fake.bodies()[0]["generationConfig"]
    assert generation["responseMimeType"] == "application/json"
    schema = generation["responseJsonSchema"]
    assert "title" not in schema
    assert schema["properties"]["score"] == {"type": ["number", "null"]}


@pytest.mark.parametrize(
    ("finish", "status"),
    [
        ("MAX_TOKENS", "truncated"),
        ("SAFETY", "cutoff"),
        ("RECITATION", "cutoff"),
        ("PROHIBITED_CONTENT", "cutoff"),
    ],
)
async def test_finish_reasons_map_to_completion_status(
    fake: FakeGemini, session: Session, finish: str, status: str
) -> None:
    fake.script.append(reply({"text": "partial"}, finish=finish))
    out = (await session.run_many("Q")).outputs[0]
    assert out.metrics.completion_status == status
    assert out.metrics.finish_reason == ("max_tokens" if finish == "MAX_TOKENS" else finish.lower())


async def test_blocked_prompt_is_a_cutoff_with_the_block_reason(
    fake: FakeGemini, session: Session
) -> None:
    fake.script.append({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": usage(5, 0)})
    out = (await session.run_many("Q")).outputs[0]
    assert out.text == ""
    assert out.metrics.finish_reason == "safety" and out.metrics.completion_status == "cutoff"
    assert (
        out.diagnostics.raw["response"]["artifacts"]["prompt_feedback"]["block_reason"] == "SAFETY"
    )


async def test_tool_loop_keeps_thought_signatures_through_json(fake: FakeGemini) -> None:
    fake.script.append(
        reply(
            {"text": "pondering", "thought": True},
            {
                "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                "thoughtSignature": "c2lnbmF0dXJlLTE=",
            },
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
        )
    )
    fake.script.append(reply({"text": "Paris 20C, Rome 25C."}))
    env = Environment(instructions="Use tools.", tools=[WEATHER])
    async with session_with(fake, config("gemini-3-flash-preview")) as s:
        first = await s.interact(env, Input("Weather in Paris and Rome?"), tool_choice="required")
        assert [c.arguments for c in first.tool_calls] == [{"city": "Paris"}, {"city": "Rome"}]
        assert first.metrics.finish_reason == "tool_calls"
        assert first.tool_calls[0].provider_state == {"thought_signature": "c2lnbmF0dXJlLTE="}
        assert first.continuation is not None
        restored = Continuation.from_jsonable(
            json.loads(json.dumps(first.continuation.to_jsonable()))
        )
        second = await s.interact(
            env,
            Input(
                "Answer briefly.",
                continuation=restored,
                tool_results=[
                    ToolResult(call_id=first.tool_calls[0].id, content='{"temp": 20}'),
                    ToolResult(
                        call_id=first.tool_calls[1].id, content="lookup failed", is_error=True
                    ),
                ],
            ),
        )
    assert second.text == "Paris 20C, Rome 25C."
    one, two = fake.bodies()
    declarations = one["tools"][0]["functionDeclarations"]
    assert declarations[0]["name"] == "get_weather"
    assert "additionalProperties" not in declarations[0]["parametersJsonSchema"]
    assert one["toolConfig"]["functionCallingConfig"]["mode"] == "ANY"
    user, model, answers = two["contents"]
    assert user == {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]}
    assert model["role"] == "model"
    assert model["parts"][0]["thoughtSignature"] == "c2lnbmF0dXJlLTE="
    assert model["parts"][0]["functionCall"]["args"] == {"city": "Paris"}
    assert all("thought" not in part for part in model["parts"])  # summaries not replayed
    responses = [p["functionResponse"] for p in answers["parts"][:2]]
    assert responses[0]["response"] == {"temp": 20} and responses[0]["name"] == "get_weather"
    assert responses[1]["response"] == {"error": "lookup failed"}
    assert answers["parts"][2] == {"text": "Answer briefly."}
    assert two["systemInstruction"]["parts"] == [{"text": "Use tools."}]


async def test_named_tool_choice_restricts_allowed_functions(
    fake: FakeGemini, session: Session
) -> None:
    await session.run_many("Q", tools=[WEATHER], tool_choice={"name": "get_weather"})
    config_ = fake.bodies()[0]["toolConfig"]["functionCallingConfig"]
    assert config_ == {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}


async def test_portable_history_replays_as_contents(fake: FakeGemini, session: Session) -> None:
    call = ToolCall.from_text(id="c1", name="get_weather", arguments_text='{"city": "Oslo"}')
    history = [
        Message(role="user", content="Weather in Oslo?"),
        Message(role="assistant", content="", tool_calls=[call]),
        Message(role="tool", content="-3C", tool_call_id="c1"),
    ]
    env = Environment(tools=[WEATHER])
    await session.interact(env, Input("And tomorrow?", history=history))
    contents = fake.bodies()[0]["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[2]["parts"][0]["functionResponse"] == {
        "id": "c1",
        "name": "get_weather",
        "response": {"result": "-3C"},
    }
    assert contents[2]["parts"][1] == {"text": "And tomorrow?"}


async def test_rate_limit_retry_info_is_honoured_then_succeeds(
    fake: FakeGemini, session: Session
) -> None:
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.001s"}
    fake.script.append(
        error(429, "Resource exhausted", code_status="RESOURCE_EXHAUSTED", details=[retry])
    )
    fake.script.append(reply({"text": "fine"}))
    out = (await session.run_many("Q")).outputs[0]
    assert out.text == "fine"
    assert len(fake.bodies()) == 2  # one pollux retry, no SDK-internal retries
    assert out.diagnostics.raw["attempts"] == 2


async def test_auth_failure_is_not_retried_and_names_the_key(
    fake: FakeGemini, session: Session
) -> None:
    fake.script.append(
        error(
            400, "API key not valid. Please pass a valid API key.", code_status="INVALID_ARGUMENT"
        )
    )
    result = await session.run_many("Q")
    assert result.outputs[0].metrics.completion_status == "error"
    assert "GEMINI_API_KEY" in str(result.outputs[0].diagnostics.error)
    assert len(fake.bodies()) == 1


async def test_stream_equals_interact(fake: FakeGemini) -> None:
    events_sse = sse(
        {
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": "Hmm ", "thought": True}]}}
            ],
            "usageMetadata": usage(5, 0),
            "responseId": "r-s",
        },
        {
            "candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}],
            "usageMetadata": usage(5, 1),
        },
        {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [{"text": "lo", "thoughtSignature": "c2ln"}],
                    },
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": usage(5, 2, thoughts=1),
        },
    )
    fake.script.append(events_sse)
    fake.script.append(
        reply(
            {"text": "Hmm ", "thought": True},
            {"text": "Hello", "thoughtSignature": "c2ln"},
            usage_=usage(5, 2, thoughts=1),
            response_id="r-s",
        )
    )
    env = Environment()
    async with session_with(fake, config()) as s:
        events = [e async for e in s.stream(env, Input("Hi"))]
        kinds = [e.type for e in events]
        assert kinds[0] == "start" and kinds[-1] == "done"
        assert "reasoning_delta" in kinds and kinds.count("text_delta") == 2
        streamed = events[-1].output
        once = await s.interact(env, Input("Hi"))
    assert streamed is not None
    assert streamed.text == once.text == "Hello"
    assert streamed.reasoning == once.reasoning == "Hmm "
    assert streamed.usage == once.usage
    assert streamed.metrics.finish_reason == once.metrics.finish_reason == "stop"
    assert streamed.continuation == once.continuation
    assert fake.requests[0][1].endswith(":streamGenerateContent")


async def test_stream_without_finish_is_a_retryable_cut(fake: FakeGemini, session: Session) -> None:
    from pollux import APIError

    cut = sse({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}]})
    fake.script.extend([cut, cut, cut])
    with pytest.raises(APIError) as info:
        _ = [e async for e in session.stream(Environment(), Input("Hi"))]
    assert info.value.error_category == "stream_cut" and info.value.retryable


async def test_stream_function_call_arrives_whole(fake: FakeGemini, session: Session) -> None:
    fake.script.append(
        sse(
            {
                "candidates": [
                    {
                        "content": {
                            "role": "model",
                            "parts": [
                                {
                                    "functionCall": {
                                        "name": "get_weather",
                                        "args": {"city": "Oslo"},
                                    },
                                    "thoughtSignature": "eA==",
                                }
                            ],
                        },
                        "finishReason": "STOP",
                    }
                ],
                "usageMetadata": usage(5, 2),
            },
        )
    )
    events = [e async for e in session.stream(Environment(tools=[WEATHER]), Input("Oslo?"))]
    calls = [e.tool_call for e in events if e.type == "tool_call"]
    assert calls and calls[0] is not None and calls[0].arguments == {"city": "Oslo"}
    assert calls[0].provider_state == {"thought_signature": "eA=="}
    assert events[-1].output is not None
    assert events[-1].output.metrics.finish_reason == "tool_calls"


async def test_provider_options_merge_and_collisions(fake: FakeGemini, session: Session) -> None:
    await session.run_many(
        "Q", provider_options={"gemini": {"top_k": 5, "stop_sequences": ["END"]}}
    )
    generation = fake.bodies()[0]["generationConfig"]
    assert generation["topK"] == 5 and generation["stopSequences"] == ["END"]
    with pytest.raises(ConfigurationError):
        await session.run_many("Q", provider_options={"gemini": {"system_instruction": "x"}})
    with pytest.raises(ConfigurationError):
        await session.run_many("Q", seed=1, provider_options={"gemini": {"seed": 2}})


async def test_check_ready(fake: FakeGemini, session: Session) -> None:
    fake.script.append({"name": "models/gemini-2.5-flash", "displayName": "Gemini 2.5 Flash"})
    ready = await session.check_ready()
    assert ready.ready and ready.model_verified
    fake.script.append(error(404, "models/nope is not found", code_status="NOT_FOUND"))
    missing = await session.check_ready()
    assert not missing.ready and missing.status_code == 404


async def test_public_generate_content_fallback_sends_the_same_body(
    fake: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pollux.providers.gemini import provider as gemini_provider

    fake.script.extend([reply({"text": "direct"}), reply({"text": "public"})])
    async with session_with(fake, config()) as s:
        direct = (await s.run_many("Q", instructions="Be brief.", max_tokens=9)).outputs[0]
        monkeypatch.setattr(gemini_provider, "DIRECT_REQUESTS", False)
        public = (await s.run_many("Q", instructions="Be brief.", max_tokens=9)).outputs[0]
    assert (direct.text, public.text) == ("direct", "public")
    first, second = fake.bodies()
    assert first == second
    assert direct.usage == public.usage


async def test_public_stream_fallback_assembles_the_same_output(
    fake: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pollux.providers.gemini import provider as gemini_provider

    chunks = sse(
        {
            "candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}],
            "usageMetadata": usage(5, 1),
        },
        {
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": "lo"}]}, "finishReason": "STOP"}
            ],
            "usageMetadata": usage(5, 2),
        },
    )
    fake.script.extend([chunks, chunks])
    env = Environment(instructions="Be brief.")
    async with session_with(fake, config()) as s:
        direct = [e async for e in s.stream(env, Input("Hi"))][-1].output
        monkeypatch.setattr(gemini_provider, "DIRECT_REQUESTS", False)
        public = [e async for e in s.stream(env, Input("Hi"))][-1].output
    assert direct is not None and public is not None
    assert direct.text == public.text == "Hello"
    assert direct.usage == public.usage
    assert direct.continuation == public.continuation
    first, second = fake.bodies(":streamGenerateContent")
    assert first["contents"] == second["contents"]
    assert first["systemInstruction"]["parts"] == second["systemInstruction"]["parts"]
