"""The Gemini wire through the official google-genai SDK: generation, streaming, tools, faults."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest
from google import genai
from google.genai import errors, types

from pollux.testing import (
    CutStream,
    DropConnection,
    Emulator,
    ErrorResponse,
    GeminiReply,
    Latency,
    MalformedBody,
    Reply,
    StreamError,
    ToolCall,
)

FLASH = "gemini-2.5-flash"
LITE = "gemini-2.5-flash-lite"
PRO3 = "gemini-3-pro-preview"


def _client(emu: Emulator, key: str = "test-key", **options: object) -> genai.Client:
    return genai.Client(
        api_key=key, http_options=types.HttpOptions(base_url=emu.base_url("gemini"), **options)
    )


@pytest.fixture
def client(emulator: Emulator) -> Iterator[genai.Client]:
    with _client(emulator) as sdk:
        yield sdk


def test_base_url_is_the_mount_and_both_api_versions_answer(emulator: Emulator) -> None:
    assert emulator.base_url("gemini") == emulator.url + "/gemini"
    for version in ("v1", "v1beta"):
        with _client(emulator, api_version=version) as sdk:
            answer = sdk.models.generate_content(model=LITE, contents="hello")
        assert answer.text == "Emulated reply to: hello"
        assert emulator.last_request.path == f"/gemini/{version}/models/{LITE}:generateContent"
        assert emulator.last_request.route == "gemini.generate.content"


def test_generate_content_reports_usage_and_stop(emulator: Emulator, client: genai.Client) -> None:
    answer = client.models.generate_content(
        model=LITE,
        contents="What is two plus two?",
        config=types.GenerateContentConfig(
            system_instruction="Answer briefly.", temperature=0.2, top_p=0.9, seed=7
        ),
    )
    assert answer.text == "Emulated reply to: What is two plus two?"
    candidate = answer.candidates[0]
    assert candidate.finish_reason == types.FinishReason.STOP
    usage = answer.usage_metadata
    # "Answer briefly." (3) + "What is two plus two?" (6)
    assert usage.prompt_token_count == 9
    assert usage.candidates_token_count == 10
    assert usage.total_token_count == 19
    assert usage.thoughts_token_count is None
    assert answer.model_version == LITE
    sent = emulator.last_request.json
    assert sent["systemInstruction"]["parts"][0]["text"] == "Answer briefly."
    assert sent["generationConfig"] == {"temperature": 0.2, "topP": 0.9, "seed": 7}
    assert emulator.last_request.headers["x-goog-api-key"] == "test-key"


async def test_async_client_generates_and_streams(emulator: Emulator) -> None:
    async with _client(emulator).aio as sdk:
        answer = await sdk.models.generate_content(model=LITE, contents="async hello")
        assert answer.text == "Emulated reply to: async hello"
        pieces = [
            chunk.text
            async for chunk in await sdk.models.generate_content_stream(
                model=LITE, contents="stream this to me please"
            )
        ]
    assert "".join(p or "" for p in pieces) == "Emulated reply to: stream this to me please"
    assert len(pieces) >= 2


def test_stream_sends_sse_with_usage_and_finish_on_the_last_chunk(
    emulator: Emulator, client: genai.Client
) -> None:
    chunks = list(
        client.models.generate_content_stream(
            model=LITE, contents="a question long enough to be split in pieces"
        )
    )
    assert len(chunks) >= 2
    assert all(c.candidates[0].finish_reason is None for c in chunks[:-1])
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.candidates_token_count == 13
    request = emulator.last_request
    assert request.route == "gemini.generate.stream"
    assert request.query == {"alt": "sse"}


def test_max_output_tokens_cuts_the_answer(client: genai.Client) -> None:
    answer = client.models.generate_content(
        model=LITE,
        contents="tell me a long story",
        config=types.GenerateContentConfig(max_output_tokens=3),
    )
    assert answer.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert answer.text == "Emulated reply to"
    assert answer.usage_metadata.candidates_token_count == 3


def test_scripted_reply_text_and_token_counts(emulator: Emulator, client: genai.Client) -> None:
    emulator.script("gemini.generate", Reply("scripted", input_tokens=40, output_tokens=5))
    answer = client.models.generate_content(model=LITE, contents="hi")
    assert answer.text == "scripted"
    assert answer.usage_metadata.prompt_token_count == 40
    assert answer.usage_metadata.candidates_token_count == 5
    emulator.assert_consumed()


def test_safety_finish_and_blocked_prompt_are_scriptable(
    emulator: Emulator, client: genai.Client
) -> None:
    emulator.script(
        "gemini.generate",
        GeminiReply(finish_reason="SAFETY"),
        GeminiReply(block_reason="SAFETY"),
        GeminiReply("quoted", finish_reason="RECITATION"),
    )
    unsafe = client.models.generate_content(model=LITE, contents="hi")
    assert unsafe.candidates[0].finish_reason == types.FinishReason.SAFETY
    assert unsafe.candidates[0].content is None
    assert any(r.blocked for r in unsafe.candidates[0].safety_ratings)
    blocked = client.models.generate_content(model=LITE, contents="hi")
    assert not blocked.candidates
    assert blocked.prompt_feedback.block_reason == types.BlockedReason.SAFETY
    recited = client.models.generate_content(model=LITE, contents="hi")
    assert recited.candidates[0].finish_reason == types.FinishReason.RECITATION
    assert recited.text == "quoted"


def test_structured_output_from_response_schema_and_json_schema(client: genai.Client) -> None:
    schema = types.Schema(
        type=types.Type.OBJECT,
        properties={
            "city": types.Schema(type=types.Type.STRING),
            "rank": types.Schema(type=types.Type.INTEGER, minimum=3),
            "tags": types.Schema(type=types.Type.ARRAY, items=types.Schema(type="STRING")),
        },
        required=["city", "rank"],
    )
    answer = client.models.generate_content(
        model=LITE,
        contents="a city",
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_schema=schema
        ),
    )
    assert answer.parsed == {"city": "city", "rank": 3, "tags": ["tags"]}
    answer = client.models.generate_content(
        model=LITE,
        contents="a colour",
        config=types.GenerateContentConfig(
            response_mime_type="application/json",
            response_json_schema={
                "type": "object",
                "properties": {"colour": {"enum": ["red", "blue"]}},
                "required": ["colour"],
                "additionalProperties": False,
            },
        ),
    )
    assert answer.parsed == {"colour": "red"}


def test_schema_without_json_mime_type_is_refused(client: genai.Client) -> None:
    with pytest.raises(errors.ClientError) as info:
        client.models.generate_content(
            model=LITE,
            contents="x",
            config=types.GenerateContentConfig(response_json_schema={"type": "object"}),
        )
    assert info.value.code == 400
    assert info.value.status == "INVALID_ARGUMENT"
    assert "response_mime_type" in info.value.message


def test_thinking_budget_level_and_thought_parts(client: genai.Client) -> None:
    answer = client.models.generate_content(
        model=FLASH,
        contents="think about it",
        config=types.GenerateContentConfig(
            thinking_config=types.ThinkingConfig(thinking_budget=512, include_thoughts=True)
        ),
    )
    thought, text = answer.candidates[0].content.parts
    assert thought.thought is True
    assert thought.text == "Reasoning about: think about it"
    assert text.thought is None and text.text == "Emulated reply to: think about it"
    assert answer.text == "Emulated reply to: think about it"
    usage = answer.usage_metadata
    assert usage.thoughts_token_count == 6 + 16  # the reasoning text, plus 16 for a low budget
    assert usage.total_token_count == (
        usage.prompt_token_count + usage.candidates_token_count + usage.thoughts_token_count
    )
    # Flash thinks by default but shows no thoughts unless asked; budget 0 turns it off.
    quiet = client.models.generate_content(model=FLASH, contents="x")
    assert len(quiet.candidates[0].content.parts) == 1
    assert quiet.usage_metadata.thoughts_token_count
    off = client.models.generate_content(
        model=FLASH,
        contents="x",
        config=types.GenerateContentConfig(thinking_config=types.ThinkingConfig(thinking_budget=0)),
    )
    assert off.usage_metadata.thoughts_token_count is None
    high = client.models.generate_content(
        model=PRO3,
        contents="x",
        config=types.GenerateContentConfig(
            thinking_config=types.ThinkingConfig(thinking_level=types.ThinkingLevel.HIGH)
        ),
    )
    assert high.usage_metadata.thoughts_token_count == 4 + 256  # 'Reasoning about: x'


@pytest.mark.parametrize(
    ("model", "thinking", "message"),
    [
        (FLASH, types.ThinkingConfig(thinking_level=types.ThinkingLevel.LOW), "not supported"),
        ("gemini-2.5-pro", types.ThinkingConfig(thinking_budget=0), "only works in thinking"),
        (
            PRO3,
            types.ThinkingConfig(thinking_budget=10, thinking_level=types.ThinkingLevel.LOW),
            "only one of",
        ),
    ],
)
def test_thinking_settings_the_model_refuses(
    client: genai.Client, model: str, thinking: types.ThinkingConfig, message: str
) -> None:
    with pytest.raises(errors.ClientError, match=message) as info:
        client.models.generate_content(
            model=model, contents="x", config=types.GenerateContentConfig(thinking_config=thinking)
        )
    assert info.value.code == 400


def get_weather(city: str) -> str:
    """Weather for a city."""
    return "sunny"


TOOLS = types.GenerateContentConfig(
    tools=[get_weather],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
)


def test_function_call_then_function_response(emulator: Emulator, client: genai.Client) -> None:
    asked = types.Content(role="user", parts=[types.Part(text="use get_weather for Paris")])
    first = client.models.generate_content(model=LITE, contents=[asked], config=TOOLS)
    (call,) = first.function_calls
    assert call.name == "get_weather"
    assert call.args == {"city": "city"}
    declared = emulator.last_request.json["tools"][0]["functionDeclarations"][0]
    assert declared["name"] == "get_weather"
    answer = types.Part.from_function_response(name="get_weather", response={"result": "sunny"})
    second = client.models.generate_content(
        model=LITE,
        contents=[asked, first.candidates[0].content, types.Content(role="user", parts=[answer])],
        config=TOOLS,
    )
    assert second.text == 'Tool results: {"result": "sunny"}'
    assert not second.function_calls


def test_tool_config_modes_and_scripted_calls(emulator: Emulator, client: genai.Client) -> None:
    forced = types.GenerateContentConfig(
        tools=TOOLS.tools,
        automatic_function_calling=TOOLS.automatic_function_calling,
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode=types.FunctionCallingConfigMode.ANY
            )
        ),
    )
    assert client.models.generate_content(model=LITE, contents="hi", config=forced).function_calls
    emulator.script(
        "gemini.generate",
        Reply(tool_calls=[ToolCall("get_weather", {"city": "Oslo"}, call_id="c1")]),
        Reply(tool_calls=[ToolCall("get_weather", "{not json")]),
    )
    scripted = client.models.generate_content(model=LITE, contents="hi", config=TOOLS)
    assert scripted.function_calls[0].args == {"city": "Oslo"}
    assert scripted.function_calls[0].id == "c1"
    broken = client.models.generate_content(model=LITE, contents="hi", config=TOOLS)
    assert broken.candidates[0].finish_reason == types.FinishReason.MALFORMED_FUNCTION_CALL
    assert not broken.function_calls


def test_gemini_3_thought_signature_must_come_back(client: genai.Client) -> None:
    asked = types.Content(role="user", parts=[types.Part(text="get_weather in Rome")])
    first = client.models.generate_content(model=PRO3, contents=[asked], config=TOOLS)
    model_turn = first.candidates[0].content
    signature = model_turn.parts[0].thought_signature
    assert signature and signature.startswith(b"EmuSig")
    result = types.Content(
        role="user",
        parts=[types.Part.from_function_response(name="get_weather", response={"t": 20})],
    )
    ok = client.models.generate_content(
        model=PRO3, contents=[asked, model_turn, result], config=TOOLS
    )
    assert ok.text.startswith("Tool results:")
    stripped = model_turn.model_copy(deep=True)
    stripped.parts[0].thought_signature = None
    with pytest.raises(errors.ClientError, match="missing a thought_signature") as info:
        client.models.generate_content(model=PRO3, contents=[asked, stripped, result], config=TOOLS)
    assert info.value.code == 400
    forged = model_turn.model_copy(deep=True)
    forged.parts[0].thought_signature = b"forged"
    with pytest.raises(errors.ClientError, match="Corrupted thought signature"):
        client.models.generate_content(model=PRO3, contents=[asked, forged, result], config=TOOLS)
    # Google's documented placeholder for histories without signatures is accepted.
    forged.parts[0].thought_signature = b"skip_thought_signature_validator"
    assert client.models.generate_content(
        model=PRO3, contents=[asked, forged, result], config=TOOLS
    ).text


def test_older_models_do_not_check_signatures(client: genai.Client) -> None:
    call = types.Part.from_function_call(name="get_weather", args={"city": "x"})
    answer = types.Part.from_function_response(name="get_weather", response={"ok": True})
    result = client.models.generate_content(
        model=LITE,
        contents=[
            types.Content(role="user", parts=[types.Part(text="go")]),
            types.Content(role="model", parts=[call]),
            types.Content(role="user", parts=[answer]),
        ],
        config=TOOLS,
    )
    assert result.text.startswith("Tool results:")


def test_mixed_camel_and_snake_keys_are_both_read(emulator: Emulator) -> None:
    import json
    import urllib.request

    body = {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "look"},
                    {"inline_data": {"mime_type": "image/png", "data": "aGk="}},
                ],
            }
        ],
        "generation_config": {"max_output_tokens": 100},
    }
    request = urllib.request.Request(
        emulator.base_url("gemini") + f"/v1beta/models/{LITE}:generateContent?key=k",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        answer = json.load(response)
    assert answer["candidates"][0]["content"]["parts"][0]["text"] == (
        "Emulated reply to: look [1 image]"
    )
    assert answer["usageMetadata"]["promptTokenCount"] == 1 + 85


def test_validation_errors_are_google_shaped(client: genai.Client) -> None:
    with pytest.raises(errors.ClientError) as info:
        client.models.generate_content(
            model=LITE, contents=[types.Content(role="robot", parts=[types.Part(text="x")])]
        )
    assert info.value.code == 400
    assert info.value.status == "INVALID_ARGUMENT"
    assert info.value.message == "Please use a valid role: user, model."
    assert info.value.details["error"]["code"] == 400


def test_models_get_list_count_tokens(emulator: Emulator, client: genai.Client) -> None:
    assert client.models.get(model=FLASH).name == f"models/{FLASH}"
    assert f"models/{PRO3}" in [m.name for m in client.models.list()]
    counted = client.models.count_tokens(model=FLASH, contents="one two three")
    assert counted.total_tokens == 3
    assert emulator.last_request.route == "gemini.count_tokens"


def test_model_catalog_restriction() -> None:
    with Emulator(models=[FLASH]) as emu, _client(emu) as sdk:
        assert [m.name for m in sdk.models.list()] == [f"models/{FLASH}"]
        with pytest.raises(errors.ClientError) as info:
            sdk.models.generate_content(model=LITE, contents="x")
    assert info.value.code == 404
    assert info.value.status == "NOT_FOUND"


# --- auth ------------------------------------------------------------------------------------


def test_wrong_key_is_api_key_invalid_and_query_key_is_read() -> None:
    import json
    import urllib.error
    import urllib.request

    with Emulator(api_key="right") as emu:
        with _client(emu, key="wrong") as sdk, pytest.raises(errors.ClientError) as info:
            sdk.models.generate_content(model=LITE, contents="x")
        assert info.value.code == 400
        reasons = [d.get("reason") for d in info.value.details["error"]["details"]]
        assert reasons == ["API_KEY_INVALID"]
        with _client(emu, key="right") as sdk:
            assert sdk.models.generate_content(model=LITE, contents="x").text
        url = emu.base_url("gemini") + f"/v1beta/models/{LITE}"
        with urllib.request.urlopen(url + "?key=right") as response:
            assert json.load(response)["name"] == f"models/{LITE}"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url)
        assert missing.value.code == 403
        assert json.load(missing.value)["error"]["status"] == "PERMISSION_DENIED"


# --- faults ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "exception", "name"),
    [
        (400, errors.ClientError, "INVALID_ARGUMENT"),
        (403, errors.ClientError, "PERMISSION_DENIED"),
        (404, errors.ClientError, "NOT_FOUND"),
        (429, errors.ClientError, "RESOURCE_EXHAUSTED"),
        (500, errors.ServerError, "INTERNAL"),
        (503, errors.ServerError, "UNAVAILABLE"),
        (504, errors.ServerError, "DEADLINE_EXCEEDED"),
    ],
)
def test_status_faults_raise_the_sdk_errors(
    emulator: Emulator,
    client: genai.Client,
    status: int,
    exception: type[errors.APIError],
    name: str,
) -> None:
    emulator.script("gemini.generate", ErrorResponse(status))
    with pytest.raises(exception) as info:
        client.models.generate_content(model=LITE, contents="x")
    assert info.value.code == status
    assert info.value.status == name
    assert info.value.message


def test_rate_limit_carries_retry_info_not_a_header(
    emulator: Emulator, client: genai.Client
) -> None:
    emulator.script("gemini", ErrorResponse(429, retry_after=7, message="Quota exceeded."))
    with pytest.raises(errors.ClientError) as info:
        client.models.generate_content(model=LITE, contents="x")
    details = info.value.details["error"]["details"]
    assert {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"} in details
    assert any(d["@type"].endswith("QuotaFailure") for d in details)
    assert info.value.message == "Quota exceeded."
    assert info.value.response.headers.get("retry-after") is None


def test_drop_malformed_and_latency_faults(emulator: Emulator) -> None:
    with _client(emulator, timeout=300) as sdk:
        emulator.script("gemini.generate", DropConnection())
        with pytest.raises(httpx2.TransportError):
            sdk.models.generate_content(model=LITE, contents="x")
        emulator.script("gemini.generate", MalformedBody())
        with pytest.raises(ValueError):
            sdk.models.generate_content(model=LITE, contents="x")
        emulator.script("gemini.generate", Latency(2))
        with pytest.raises(httpx2.TimeoutException):
            sdk.models.generate_content(model=LITE, contents="x")


def test_stream_cut_and_in_band_error(emulator: Emulator, client: genai.Client) -> None:
    long = "a question long enough to need several chunks of text"
    emulator.script("gemini.generate.stream", CutStream(after_events=1))
    received: list[str | None] = []
    with pytest.raises(httpx2.TransportError):
        for chunk in client.models.generate_content_stream(model=LITE, contents=long):
            received.append(chunk.text)
    assert len(received) == 1
    emulator.script("gemini.generate.stream", StreamError("backend died", after_events=1))
    received = []
    with pytest.raises(errors.ServerError) as info:
        for chunk in client.models.generate_content_stream(model=LITE, contents=long):
            received.append(chunk.text)
    assert len(received) == 1
    assert info.value.message == "backend died"
    assert info.value.status == "INTERNAL"


def test_request_log_records_what_went_over_the_wire(
    emulator: Emulator, client: genai.Client
) -> None:
    client.models.generate_content(model=LITE, contents="logged")
    client.models.count_tokens(model=LITE, contents="counted")
    generated = emulator.requests_for("gemini.generate")
    assert [r.json["contents"][0]["parts"][0]["text"] for r in generated] == ["logged"]
    assert [r.route for r in emulator.requests_for("gemini")] == [
        "gemini.generate.content",
        "gemini.count_tokens",
    ]
    assert all(r.wire == "gemini" for r in emulator.requests)


def test_unknown_route_is_a_google_404(emulator: Emulator, client: genai.Client) -> None:
    import json
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(emulator.base_url("gemini") + "/v1beta/nothing?key=k")
    assert info.value.code == 404
    assert json.load(info.value)["error"]["status"] == "NOT_FOUND"


def test_unknown_fields_are_refused_like_the_real_api(emulator: Emulator) -> None:
    with (
        _client(emulator, extra_body={"generationConfig": {"maxTokens": 5}}) as sdk,
        pytest.raises(errors.ClientError) as info,
    ):
        sdk.models.generate_content(model=LITE, contents="x")
    assert info.value.message == (
        "Invalid JSON payload received. Unknown name \"maxTokens\" at 'generation_config': "
        "Cannot find field."
    )
    with (
        _client(emulator, extra_body={"temperatur": 1}) as sdk,
        pytest.raises(errors.ClientError, match='Unknown name "temperatur"'),
    ):
        sdk.models.generate_content(model=LITE, contents="x")


def test_candidate_count_and_enum_answers(client: genai.Client) -> None:
    two = client.models.generate_content(
        model=LITE, contents="pick", config=types.GenerateContentConfig(candidate_count=2)
    )
    assert [c.index for c in two.candidates] == [0, 1]
    assert two.usage_metadata.candidates_token_count == 2 * 5
    colour = client.models.generate_content(
        model=LITE,
        contents="pick",
        config=types.GenerateContentConfig(
            response_mime_type="text/x.enum",
            response_schema=types.Schema(type=types.Type.STRING, enum=["green", "red"]),
        ),
    )
    assert colour.text == "green"


async def test_async_faults_surface_through_the_aiohttp_transport(emulator: Emulator) -> None:
    import aiohttp

    long = "a question long enough to need several chunks of text"
    async with _client(emulator).aio as sdk:
        emulator.script("gemini.generate", ErrorResponse(429, retry_after=1))
        with pytest.raises(errors.ClientError) as info:
            await sdk.models.generate_content(model=LITE, contents="x")
        assert info.value.code == 429
        emulator.script("gemini.generate.stream", StreamError("gone", after_events=1))
        seen = []
        with pytest.raises(errors.ServerError, match="gone"):
            async for chunk in await sdk.models.generate_content_stream(model=LITE, contents=long):
                seen.append(chunk)
        assert len(seen) == 1
        emulator.script("gemini.generate.stream", CutStream(after_events=1))
        with pytest.raises(aiohttp.ClientError):
            async for _chunk in await sdk.models.generate_content_stream(model=LITE, contents=long):
                pass
        assert (await sdk.models.generate_content(model=LITE, contents="after")).text


def test_the_wire_runs_in_a_child_process() -> None:
    with Emulator(process=True) as emu, _client(emu) as sdk:
        assert sdk.models.generate_content(model=LITE, contents="far").text == (
            "Emulated reply to: far"
        )


def test_schema_with_defs_and_refs(client: genai.Client) -> None:
    schema = types.Schema(
        type=types.Type.OBJECT,
        properties={"item": types.Schema(ref="#/defs/Item")},
        required=["item"],
        defs={
            "Item": types.Schema(
                type=types.Type.OBJECT,
                properties={"n": types.Schema(type=types.Type.NUMBER, maximum=0.5)},
                required=["n"],
            )
        },
    )
    answer = client.models.generate_content(
        model=LITE,
        contents="x",
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_schema=schema
        ),
    )
    assert answer.parsed == {"item": {"n": 0.5}}


def test_scripted_reasoning_becomes_a_thought_part(
    emulator: Emulator, client: genai.Client
) -> None:
    emulator.script(
        "gemini.generate",
        Reply("answer", reasoning="Scripted thinking.", reasoning_tokens=12),
        Reply(reasoning="Thinking before the call.", tool_calls=[ToolCall("get_weather", {})]),
    )
    with_thoughts = types.GenerateContentConfig(
        thinking_config=types.ThinkingConfig(include_thoughts=True)
    )
    answer = client.models.generate_content(model=LITE, contents="x", config=with_thoughts)
    thought, text = answer.candidates[0].content.parts
    assert (thought.thought, thought.text) == (True, "Scripted thinking.")
    assert text.text == "answer"
    assert answer.usage_metadata.thoughts_token_count == 12
    called = client.models.generate_content(model=LITE, contents="x", config=TOOLS)
    assert [p.thought for p in called.candidates[0].content.parts] == [None]  # not asked for
    assert called.candidates[0].content.parts[0].thought_signature


def test_wire_state_accessor_errors() -> None:
    from pollux.testing import EmulatorError

    with Emulator() as emu:
        assert emu.wire("gemini").file_ttl_seconds == 48 * 3600
        assert emu.wire("local") is None  # a wire without knobs
        with pytest.raises(EmulatorError, match="unknown wire") as info:
            emu.wire("gopher")
        assert "gemini" in info.value.hint
    with Emulator(process=True) as emu, pytest.raises(EmulatorError, match="child process"):
        emu.wire("gemini")


def test_stream_carries_thoughts_calls_signatures_and_blocks(
    emulator: Emulator, client: genai.Client
) -> None:
    config = types.GenerateContentConfig(
        tools=TOOLS.tools,
        automatic_function_calling=TOOLS.automatic_function_calling,
        thinking_config=types.ThinkingConfig(include_thoughts=True),
    )
    chunks = list(
        client.models.generate_content_stream(
            model=PRO3, contents="get_weather for Lima", config=config
        )
    )
    parts = [p for c in chunks for p in c.candidates[0].content.parts]
    assert parts[0].thought is True
    (call,) = [p for p in parts if p.function_call]
    assert call.function_call.name == "get_weather"
    assert call.thought_signature and call.thought_signature.startswith(b"EmuSig")
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.thoughts_token_count
    emulator.script("gemini.generate.stream", GeminiReply(block_reason="PROHIBITED_CONTENT"))
    (blocked,) = list(client.models.generate_content_stream(model=LITE, contents="x"))
    assert blocked.prompt_feedback.block_reason == types.BlockedReason.PROHIBITED_CONTENT
    assert not blocked.candidates


def test_error_status_name_and_reason_are_scriptable(
    emulator: Emulator, client: genai.Client
) -> None:
    emulator.script(
        "gemini.generate",
        ErrorResponse(400, "User location is not supported.", error_type="FAILED_PRECONDITION"),
        ErrorResponse(403, code="SERVICE_DISABLED"),
    )
    with pytest.raises(errors.ClientError) as info:
        client.models.generate_content(model=LITE, contents="x")
    assert (info.value.status, info.value.message) == (
        "FAILED_PRECONDITION",
        "User location is not supported.",
    )
    with pytest.raises(errors.ClientError) as info:
        client.models.generate_content(model=LITE, contents="x")
    assert info.value.status == "PERMISSION_DENIED"
    assert info.value.message == "The caller does not have permission"
    (detail,) = info.value.details["error"]["details"]
    assert detail["reason"] == "SERVICE_DISABLED"
