"""Issue 19: the edges a real OpenAI-compatible gateway (LiteLLM) showed, through the emulator.

Each test scripts the emulator to answer the way the gateway did: structured answers that do not
match the schema, tools with optional parameters under strict mode, 400 for an unknown model,
401 on the readiness probe, 529 "overloaded", and a failed stream whose body is event-stream text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

import pollux
from pollux import APIError, Config, Environment, Input, ToolDeclaration
from pollux.providers._errors import STATUS_TABLE, api_error, is_unknown_model, status_rule
from pollux.providers._schema import schema_problem
from pollux.testing import Emulator, ErrorResponse, MalformedBody, Reply

from .conftest import FAST_RETRY


class Person(BaseModel):
    name: str
    age: int


class Contact(BaseModel):
    name: str
    nickname: str = "none"
    email: str | None = None


# -- structured output that does not match its schema -------------------------------------------


async def test_an_answer_that_is_not_json_is_a_visible_failure(
    emu: Emulator, local_config: Config
) -> None:
    emu.script("local", Reply("Sure! The person is Ada, 36."))
    out = await pollux.run("Who?", config=local_config, output=Person)
    assert out.structured is None
    assert out.text == "Sure! The person is Ada, 36."  # the answer is kept
    assert out.metrics.completion_status == "error"
    assert out.failed
    error = out.diagnostics.error
    assert error is not None
    assert error["error_category"] == "structured_output"
    assert "not valid JSON" in error["message"]
    assert error["hint"]
    # The bare message stays where code written earlier reads it.
    assert "not valid JSON" in out.diagnostics.raw["structured_error"]


async def test_run_many_counts_answers_that_fail_validation(
    emu: Emulator, local_config: Config
) -> None:
    emu.script(
        "local",
        Reply(structured={"name": "Ada", "age": 36}),
        Reply(structured={"name": "Bob"}),  # misses "age"
        Reply(structured={"name": "Cy", "age": 7}),
    )
    config = Config(
        provider="local",
        model="emulator-model",
        base_url=local_config.base_url,
        request_concurrency=1,  # the scripted replies answer the prompts in order
        retry=FAST_RETRY,
    )
    result = await pollux.run_many(["a", "b", "c"], config=config, output=Person)
    assert result.status == "partial"
    failed = [o for o in result.outputs if o.failed]
    assert len(failed) == 1
    error = result.errors[1]
    assert error is not None and error["error_category"] == "structured_output"
    assert "does not validate against Person" in error["message"]
    assert result.structured[0] == Person(name="Ada", age=36)
    # The JSON form carries the same facts.
    payload = result.to_jsonable()
    assert payload["status"] == "partial"
    assert payload["outputs"][1]["metrics"]["completion_status"] == "error"


async def test_a_streamed_done_output_reports_the_failure(
    emu: Emulator, local_config: Config
) -> None:
    emu.script("local", Reply("not json"))
    events = [
        e
        async for e in pollux.stream(
            Environment(), Input("Who?"), config=local_config, output=Person
        )
    ]
    done = events[-1]
    assert done.type == "done" and done.output is not None
    assert done.output.metrics.completion_status == "error"
    error = done.output.diagnostics.error
    assert error is not None and error["error_category"] == "structured_output"


async def test_a_truncated_json_answer_says_to_raise_max_tokens(
    emu: Emulator, local_config: Config
) -> None:
    emu.script("local", Reply('{"name": "Ada", "ag', truncated=True))
    out = await pollux.run("Who?", config=local_config, output=Person)
    assert out.failed
    error = out.diagnostics.error
    assert error is not None
    assert "cut off" in error["message"] and "max_tokens" in error["hint"]


async def test_a_valid_answer_stays_clean(emu: Emulator, local_config: Config) -> None:
    emu.script("local", Reply(structured={"name": "Ada", "age": 36}))
    out = await pollux.run("Who?", config=local_config, output=Person)
    assert out.structured == Person(name="Ada", age=36)
    assert out.metrics.completion_status == "clean"
    assert out.diagnostics.error is None


# -- strict schemas keep the declared meaning -----------------------------------------------------

WEATHER = ToolDeclaration(
    name="get_weather",
    description="Weather for a city",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
)


async def test_an_optional_tool_parameter_goes_out_nullable(
    emu: Emulator, local_config: Config
) -> None:
    declared = json.dumps(WEATHER.parameters, sort_keys=True)
    out = await pollux.run("Call get_weather for Oslo", config=local_config, tools=[WEATHER])
    assert out.tool_calls  # the emulator accepted the strict schema and called the tool
    body = emu.requests_for("local.chat")[-1].json
    assert isinstance(body, dict)
    function = body["tools"][0]["function"]
    assert function["strict"] is True
    params = function["parameters"]
    assert params["required"] == ["city", "unit"]
    assert params["properties"]["city"] == {"type": "string"}  # required stays non-null
    assert params["properties"]["unit"] == {"type": ["string", "null"]}  # optional: nullable
    assert json.dumps(WEATHER.parameters, sort_keys=True) == declared  # never changed


async def test_optional_fields_answered_null_get_their_declared_default(
    emu: Emulator, local_config: Config
) -> None:
    emu.script("local", Reply(structured={"name": "Ada", "nickname": None, "email": None}))
    out = await pollux.run("Who?", config=local_config, output=Contact)
    # nickname rejects null, so null meant "absent": the default applies; email accepts null.
    assert out.structured == Contact(name="Ada", nickname="none", email=None)
    body = emu.requests_for("local.chat")[-1].json
    assert isinstance(body, dict)
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["name", "nickname", "email"]
    assert schema["properties"]["nickname"]["type"] == ["string", "null"]


# -- hints that fit ----------------------------------------------------------------------------


async def test_a_400_for_an_unknown_model_gets_the_model_hint(
    emu: Emulator, local_config: Config
) -> None:
    message = "litellm.BadRequestError: Invalid model name passed in model=gpt-99"
    emu.script("local", ErrorResponse(400, message=message))
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=local_config)
    assert info.value.status_code == 400
    assert "Config.model" in (info.value.hint or "")
    assert "/models" in (info.value.hint or "")


def test_the_model_hint_is_shared_by_every_provider() -> None:
    error = api_error(
        provider="openai",
        phase="generate",
        status_code=400,
        message="Invalid model name passed in model=gpt-99",
    )
    assert "Config.model" in (error.hint or "")
    other = api_error(
        provider="openai", phase="generate", status_code=400, message="Unknown parameter: foo"
    )
    assert "Config.model" not in (other.hint or "")


async def test_check_ready_on_401_names_the_key_and_quotes_the_server(
    emu: Emulator, local_config: Config
) -> None:
    emu.script("local", ErrorResponse(401, message="Authentication Error, No api key passed in."))
    status = await pollux.check_ready(local_config)
    assert not status.ready and status.status_code == 401
    assert "No api key passed in" in status.message
    assert "api_key" in status.message
    assert "server logs" not in status.message


# -- one table decides what is retried ----------------------------------------------------------


async def test_529_overloaded_is_retried(emu: Emulator, local_config: Config) -> None:
    emu.script("local", ErrorResponse(529, message="Overloaded"), Reply("fine"))
    out = await pollux.run("Hi", config=local_config)
    assert out.text == "fine"
    assert len(emu.requests_for("local.chat")) == 2


def test_the_status_table_matches_the_docs() -> None:
    assert status_rule(529) == ("capacity", True)
    assert status_rule(599) == ("capacity", True)  # any other 5xx is retried
    assert status_rule(501) == ("not_implemented", False)
    assert status_rule(418) == ("invalid_request", False)
    docs = (Path(__file__).parents[3] / "docs" / "pollux" / "engine.md").read_text("utf-8")
    for status, (category, retryable) in STATUS_TABLE.items():
        row = f"| {status} | `{category}` | {'yes' if retryable else 'no'} |"
        assert row in docs, f"docs/pollux/engine.md lacks the row {row!r}"


# -- a failed stream's message is the server's words, not SSE text -----------------------------


async def test_a_failed_stream_quotes_the_server_message(
    emu: Emulator, local_config: Config
) -> None:
    body = (
        'data: {"error": {"message": "litellm.BadRequestError: Invalid model name", '
        '"type": "invalid_request_error", "code": "400"}}\n\ndata: [DONE]\n\n'
    )
    emu.script("local", ErrorResponse(400, body=body))
    with pytest.raises(APIError) as info:
        async for _ in pollux.stream(Environment(), Input("Hi"), config=local_config):
            pass
    text = str(info.value)
    assert "litellm.BadRequestError: Invalid model name" in text
    assert "data:" not in text and "[DONE]" not in text
    assert "Config.model" in (info.value.hint or "")


async def test_a_garbled_stream_event_fails_the_stream(emu: Emulator, local_config: Config) -> None:
    # It was skipped: the stream finished "clean" with whatever text the event carried lost.
    emu.script("local", MalformedBody(after_events=2))
    kinds: list[str] = []
    with pytest.raises(APIError, match="could not be decoded") as info:
        async for event in pollux.stream(Environment(), Input("Hi there"), config=local_config):
            kinds.append(event.type)
    assert "text_delta" in kinds and "done" not in kinds
    assert info.value.retryable and info.value.hint


async def test_a_garbled_first_event_is_retried(emu: Emulator, local_config: Config) -> None:
    emu.script("local", MalformedBody(after_events=0))
    async for event in pollux.stream(Environment(), Input("Hi there"), config=local_config):
        final = event
    assert final.type == "done" and final.output is not None
    assert final.output.text == "Emulated reply to: Hi there"
    assert len(emu.requests_for("local.chat.completions")) == 2


# -- the same facets on the OpenAI Responses path (the engine assembles for every provider) -----


@pytest.fixture
def openai_config(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Emulator, Config]]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        yield (
            emulator,
            Config(provider="openai", model="gpt-5-nano", api_key="sk-test", retry=FAST_RETRY),
        )


async def test_openai_structured_failure_and_strict_tools(
    openai_config: tuple[Emulator, Config],
) -> None:
    emu, config = openai_config
    emu.script("openai.responses", Reply("no JSON here"))
    out = await pollux.run("Who?", config=config, output=Person)
    assert out.failed and out.structured is None
    error = out.diagnostics.error
    assert error is not None and error["error_category"] == "structured_output"
    await pollux.run("Call get_weather for Oslo", config=config, tools=[WEATHER])
    body = emu.requests_for("openai.responses")[-1].json
    assert isinstance(body, dict)
    (tool,) = body["tools"]
    assert tool["strict"] is True
    assert tool["parameters"]["properties"]["unit"] == {"type": ["string", "null"]}


async def test_openai_400_for_an_unknown_model_keeps_the_model_hint(
    openai_config: tuple[Emulator, Config],
) -> None:
    emu, config = openai_config
    emu.script(
        "openai.responses",
        ErrorResponse(400, message="Invalid model name passed in model=gpt-99", param="model"),
    )
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    assert "Config.model" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("message", "unknown"),
    [
        ("Invalid model name passed in model=gpt-99", True),
        ("The model `gpt-9` does not exist or you do not have access to it.", True),
        ('model "llama9" not found, try pulling it first', True),
        ("unknown model: x", True),
        ("The model produced invalid JSON", False),
        ("Unsupported value: temperature does not support 0.2 with this model", False),
        ("tools are not supported by this model", False),
        # Gemini 2.5 Pro refusing thinking_budget=0: one sentence ends before "model" starts.
        ("Budget 0 is invalid. This model only works in thinking mode.", False),
    ],
)
def test_unknown_model_detection(message: str, unknown: bool) -> None:
    assert is_unknown_model(400, message) is unknown


PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
}


async def test_a_json_schema_output_is_validated_too(emu: Emulator, local_config: Config) -> None:
    emu.script(
        "local",
        Reply(structured={"name": "Ada", "age": "thirty-six"}),
        Reply(structured={"name": "Ada", "age": 36}),
    )
    bad = await pollux.run("Who?", config=local_config, output=PERSON_SCHEMA)
    assert bad.failed and bad.structured is None
    error = bad.diagnostics.error
    assert error is not None and "$.age: expected integer, got string" in error["message"]
    good = await pollux.run("Who?", config=local_config, output=PERSON_SCHEMA)
    assert good.structured == {"name": "Ada", "age": 36} and not good.failed


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"name": "Ada", "age": 36}, None),
        ({"name": "Ada", "age": 36.0}, None),  # JSON Schema: 36.0 is an integer
        ({"name": "Ada"}, "$: missing required age"),
        ({"name": "Ada", "age": -1}, "$.age: -1 violates minimum 0"),
        ({"name": "Ada", "age": True}, "$.age: expected integer, got boolean"),
        ([], "$: expected object, got array"),
    ],
)
def test_schema_problem(value: object, problem: str | None) -> None:
    assert schema_problem(value, PERSON_SCHEMA) == problem


def test_schema_problem_follows_refs_and_unions() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}, "maxItems": 2},
            "mode": {"anyOf": [{"enum": ["a", "b"]}, {"type": "null"}]},
        },
        "additionalProperties": False,
        "$defs": {"Tag": {"type": "string", "minLength": 1}},
    }
    assert schema_problem({"tags": ["x"], "mode": None}, schema) is None
    assert schema_problem({"tags": [""]}, schema) == "$.tags[0]: shorter than 1 characters"
    assert schema_problem({"tags": ["a", "b", "c"]}, schema) == "$.tags: more than 2 items"
    assert schema_problem({"mode": "c"}, schema) is not None
    assert schema_problem({"other": 1}, schema) == "$: unexpected property 'other'"
