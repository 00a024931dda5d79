"""Unit tests of the Anthropic compile, extract, stream and caching modules on plain dicts and SDK
types (no network)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import Message as SDKMessage

from pollux import CachePolicy, ConfigurationError, Source, ToolDeclaration, ToolResult
from pollux.interaction.messages import Message
from pollux.interaction.tools import ToolCall
from pollux.providers.anthropic.caching import (
    apply_breakpoints,
    cache_control,
    prefix_cacheable,
    validate_cache,
)
from pollux.providers.anthropic.compile import (
    compile_request,
    conversation,
    json_schema,
    validate_options,
)
from pollux.providers.anthropic.errors import event_error, wrap_anthropic_error
from pollux.providers.anthropic.extract import extract_response, extract_usage
from pollux.providers.anthropic.models import family
from pollux.providers.anthropic.stream import MessagesStreamMapper
from pollux.providers.anthropic.uploads import plan_source


def sdk_message(content: list[dict[str, Any]], **overrides: Any) -> SDKMessage:
    data: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    data.update(overrides)
    return SDKMessage.model_validate(data)


# ------------------------------------------------------------------ models


@pytest.mark.parametrize(
    ("model", "max_tokens", "adaptive", "reasoning"),
    [
        ("claude-3-opus-20240229", 4096, False, False),
        ("claude-3-5-sonnet-20241022", 8192, False, False),
        ("claude-3-7-sonnet-latest", 16384, False, True),
        ("claude-sonnet-4-5-20250929", 16384, False, True),
        ("claude-opus-4-20250514", 16384, False, True),
        ("claude-sonnet-4-6", 16384, True, True),
        ("claude-opus-4-7", 16384, True, True),
        ("claude-haiku-5-5", 16384, True, True),
    ],
)
def test_model_families(model: str, max_tokens: int, adaptive: bool, reasoning: bool) -> None:
    fam = family(model)
    assert fam.default_max_tokens == max_tokens
    assert fam.adaptive_thinking is adaptive
    assert fam.reasoning is reasoning


# ------------------------------------------------------------------ schema and options


def test_json_schema_closes_objects_without_touching_required() -> None:
    declared = {
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "object", "properties": {"c": {"type": "integer"}}},
        },
        "required": ["a"],
        "$defs": {"D": {"type": "object", "properties": {}}},
    }
    before = json.dumps(declared, sort_keys=True)
    closed = json_schema(declared)
    assert json.dumps(declared, sort_keys=True) == before  # the input is not modified
    assert closed["additionalProperties"] is False
    assert closed["properties"]["b"]["additionalProperties"] is False
    assert closed["$defs"]["D"]["additionalProperties"] is False
    assert closed["required"] == ["a"]
    assert "required" not in closed["properties"]["b"]


def test_options_refused_before_io() -> None:
    base: dict[str, Any] = {
        "model": "claude-haiku-4-5",
        "reasoning_effort": None,
        "reasoning_budget_tokens": None,
        "max_tokens": None,
        "temperature": None,
        "top_p": None,
        "tool_choice": None,
        "has_schema": False,
        "provider_options": None,
    }
    cases = [
        ({"reasoning_effort": "extreme"}, "Unknown reasoning_effort"),
        ({"reasoning_budget_tokens": 100}, "minimum"),
        ({"reasoning_budget_tokens": 4096, "max_tokens": 4000}, "larger than"),
        ({"reasoning_effort": "low", "temperature": 0.2}, "temperature"),
        ({"reasoning_effort": "low", "tool_choice": "required"}, "tool_choice"),
        ({"provider_options": {"messages": []}}, "may not set"),
    ]
    for overrides, message in cases:
        with pytest.raises(ConfigurationError, match=message) as caught:
            validate_options(**{**base, **overrides})
        assert caught.value.hint
    # Interleaved thinking (budget thinking with tools): the budget covers the whole turn.
    validate_options(
        **{**base, "reasoning_budget_tokens": 4096, "max_tokens": 4000, "has_tools": True}
    )


def test_effort_maps_to_budget_on_manual_models_and_default_max_tokens_grows() -> None:
    call = compile_request(
        model="claude-3-7-sonnet-latest",
        instructions=None,
        source_blocks=(),
        messages=conversation(prior=None, history=None, tool_results=(), content="hi"),
        tools=(ToolDeclaration(name="t"),),
        reasoning_budget_tokens=20000,
    )
    assert call.kwargs["thinking"] == {"type": "enabled", "budget_tokens": 20000}
    assert call.kwargs["max_tokens"] > 20000
    assert "interleaved-thinking-2025-05-14" in call.betas
    # No strict tools on Claude 3.x.
    assert "strict" not in call.kwargs["tools"][0]


def test_provider_options_merge_and_collide() -> None:
    messages = conversation(prior=None, history=None, tool_results=(), content="hi")
    call = compile_request(
        model="claude-haiku-4-5",
        instructions=None,
        source_blocks=(),
        messages=messages,
        provider_options={"top_k": 5, "tools": [{"type": "web_search_20250305", "name": "ws"}]},
    )
    assert call.kwargs["top_k"] == 5
    assert call.kwargs["tools"][-1]["name"] == "ws"
    with pytest.raises(ConfigurationError, match="collides"):
        compile_request(
            model="claude-haiku-4-5",
            instructions=None,
            source_blocks=(),
            messages=messages,
            provider_options={"max_tokens": 5},
        )


# ------------------------------------------------------------------ conversation


def test_conversation_merges_roles_and_leads_with_tool_results() -> None:
    history = [
        Message(role="user", content="q"),
        Message(
            role="assistant",
            content="",
            tool_calls=(ToolCall.from_text(id="c1", name="t", arguments_text='{"x": 1}'),),
        ),
        Message(role="tool", content="r1", tool_call_id="c1"),
        Message(role="user", content="and?"),
    ]
    messages = conversation(prior=None, history=history, tool_results=(), content="more")
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "t", "input": {"x": 1}}
    ]
    assert messages[2]["content"][0]["type"] == "tool_result"
    assert [b.get("text") for b in messages[2]["content"][1:]] == ["and?", "more"]


def test_tool_result_error_flag_is_forwarded() -> None:
    messages = conversation(
        prior=[
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c", "name": "t", "input": {}}],
            },
        ],
        history=None,
        tool_results=(ToolResult(call_id="c", content="bad", is_error=True),),
        content=None,
    )
    assert messages[-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "c", "content": "bad", "is_error": True}
    ]


# ------------------------------------------------------------------ caching


def test_breakpoints_at_most_four_and_never_mutate_inputs() -> None:
    source = {"type": "text", "text": "S"}
    kwargs: dict[str, Any] = {
        "tools": [{"name": "a"}, {"name": "b"}],
        "system": [{"type": "text", "text": "sys"}],
        "messages": [
            {"role": "user", "content": [source, {"type": "text", "text": "q"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "", "signature": "s"},
                    {"type": "text", "text": "a"},
                ],
            },
            {"role": "user", "content": [{"type": "text", "text": "q2"}]},
        ],
    }
    count = apply_breakpoints(kwargs, {"type": "ephemeral"}, source_count=1, conversation_end=1)
    assert count == 4
    assert "cache_control" not in source
    assert "cache_control" in kwargs["tools"][1] and "cache_control" not in kwargs["tools"][0]
    assert "cache_control" in kwargs["messages"][0]["content"][0]
    assert "cache_control" not in kwargs["messages"][0]["content"][1]
    assistant = kwargs["messages"][1]["content"]
    assert "cache_control" not in assistant[0]  # thinking blocks cannot carry one
    assert "cache_control" in assistant[1]


def test_cache_settings() -> None:
    assert cache_control("none") is None
    assert cache_control(None) == {"type": "ephemeral"}
    assert cache_control(CachePolicy(ttl_seconds=300)) == {"type": "ephemeral", "ttl": "5m"}
    assert cache_control(CachePolicy(ttl_seconds=3600)) == {"type": "ephemeral", "ttl": "1h"}
    with pytest.raises(ConfigurationError):
        validate_cache(CachePolicy(ttl_seconds=120))
    assert not prefix_cacheable("claude-haiku-4-5", "short", (), (Source.from_text("tiny"),))
    assert prefix_cacheable("claude-haiku-4-5", None, (), (Source.from_text("x" * 20000),))
    pdf = Source.from_uri("https://example.com/a.pdf", mime_type="application/pdf")
    assert prefix_cacheable("claude-haiku-4-5", None, (), (pdf,))


# ------------------------------------------------------------------ sources


def test_source_routes() -> None:
    assert plan_source(Source.from_text("x")) == "text"
    assert plan_source(Source.from_bytes(b"%PDF", mime_type="application/pdf")) == "upload_pdf"
    assert plan_source(Source.from_bytes(b"a,b", mime_type="text/csv")) == "upload_text"
    assert plan_source(Source.from_arxiv("2301.07041")) == "url_pdf"
    for bad in (
        Source.from_uri("https://example.com/page.html", mime_type="text/html"),
        Source.from_bytes(b"\x00", mime_type="audio/mpeg"),
        Source.from_bytes(b"\x00", mime_type="application/zip"),
    ):
        with pytest.raises(ConfigurationError) as caught:
            plan_source(bad)
        assert caught.value.hint


# ------------------------------------------------------------------ extract and stream


def test_extract_keeps_signed_thinking_and_usage_adds_cache() -> None:
    message = sdk_message(
        [
            {"type": "thinking", "thinking": "hmm", "signature": "sig=="},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Hi"},
            {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {"a": None, "b": [1]}},
        ],
        stop_reason="tool_use",
        usage={
            "input_tokens": 3,
            "output_tokens": 7,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 20,
            "output_tokens_details": {"thinking_tokens": 4},
        },
    )
    response = extract_response(message)
    assert response.text == "Hi"
    assert response.reasoning == "hmm"
    assert response.finish_reason == "tool_calls"
    (call,) = response.tool_calls
    assert call.arguments == {"a": None, "b": [1]}
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.cached_tokens) == (123, 100)
    assert response.usage.cache_write_tokens == 20
    assert response.usage.reasoning_tokens == 4
    blocks = response.provider_state["anthropic_content"]  # type: ignore[index]
    assert blocks[0] == {"type": "thinking", "thinking": "hmm", "signature": "sig=="}
    assert blocks[1] == {"type": "redacted_thinking", "data": "opaque"}
    assert blocks[3]["input"] == {"a": None, "b": [1]}


def test_usage_without_cache_fields() -> None:
    usage = extract_usage({"input_tokens": 4, "output_tokens": 2})
    assert usage is not None
    assert (usage.input_tokens, usage.cached_tokens, usage.cache_write_tokens) == (4, None, None)


def _events() -> list[dict[str, Any]]:
    return [
        {
            "type": "message_start",
            "message": {"id": "msg_9", "usage": {"input_tokens": 5, "output_tokens": 1}},
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "a"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "S1"},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "thinking_delta", "thinking": "b"},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "tu", "name": "t", "input": {}},
        },
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]


def test_stream_mapper_matches_the_one_shot_shape() -> None:
    mapper = MessagesStreamMapper()
    chunks = [c for c in (mapper.feed(e) for e in _events()) if c is not None]
    mapper.finish()
    assert "".join(c.reasoning for c in chunks) == "a\n\nb"
    final = chunks[-1]
    assert final.provider_state is not None
    blocks = final.provider_state["anthropic_content"]
    assert blocks[0] == {"type": "thinking", "thinking": "a", "signature": "S1"}
    assert blocks[2] == {"type": "tool_use", "id": "tu", "name": "t", "input": {}}
    assert [c.arguments_text for c in final.tool_calls] == ["{}"]
    usages = [c.usage for c in chunks if c.usage is not None]
    assert usages[-1] is not None and usages[-1].output_tokens == 9
    assert usages[-1].input_tokens == 5


def test_stream_mapper_raises_on_error_and_on_a_cut() -> None:
    mapper = MessagesStreamMapper()
    mapper.feed(_events()[0])
    with pytest.raises(Exception, match="overloaded") as caught:
        mapper.feed({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    assert getattr(caught.value, "retryable", None) is True
    cut = MessagesStreamMapper()
    cut.feed(_events()[0])
    with pytest.raises(Exception, match="message_stop"):
        cut.finish()


def test_errors_keep_hints() -> None:
    assert event_error("overloaded_error", "x").error_category == "capacity"
    wrapped = wrap_anthropic_error(RuntimeError("boom"))
    assert wrapped.hint


def test_stream_mapper_server_tool_blocks_are_kept_for_replay() -> None:
    mapper = MessagesStreamMapper()
    events = [
        _events()[0],
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {
                "type": "server_tool_use",
                "id": "srv",
                "name": "web_search",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": "x"}'},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 1},
        },
        {"type": "message_stop"},
    ]
    chunks = [c for c in (mapper.feed(e) for e in events) if c is not None]
    final = chunks[-1]
    assert final.provider_state is not None
    (block,) = final.provider_state["anthropic_content"]
    assert block == {
        "type": "server_tool_use",
        "id": "srv",
        "name": "web_search",
        "input": {"query": "x"},
    }
    assert final.tool_calls == ()  # server tools are not the application's to run


@pytest.mark.parametrize(
    ("model", "thinking", "effort"),
    [
        ("claude-opus-4-5", {"type": "enabled", "budget_tokens": 10240}, "high"),
        ("claude-sonnet-4-5", {"type": "enabled", "budget_tokens": 10240}, None),
        ("claude-sonnet-4-6", {"type": "adaptive"}, "high"),
    ],
)
def test_effort_per_family(model: str, thinking: dict[str, Any], effort: str | None) -> None:
    call = compile_request(
        model=model,
        instructions=None,
        source_blocks=(),
        messages=conversation(prior=None, history=None, tool_results=(), content="hi"),
        reasoning_effort="high",
    )
    assert call.kwargs["thinking"] == thinking
    assert call.kwargs.get("output_config", {}).get("effort") == effort
    assert call.betas == ()  # no tools: no interleaved-thinking beta


def test_oversized_files_are_refused_before_upload(monkeypatch: pytest.MonkeyPatch) -> None:
    from pollux.providers.anthropic import uploads

    monkeypatch.setattr(uploads, "MAX_FILE_BYTES", 4)
    with pytest.raises(ConfigurationError, match="Files API takes files up to") as caught:
        plan_source(Source.from_bytes(b"%PDF-1.4", mime_type="application/pdf"))
    assert caught.value.hint
