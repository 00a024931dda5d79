"""registry_from_mcp with in-memory fake sessions (the 1.x wire shape and real mcp 2.x types)."""

from __future__ import annotations

from typing import Any

import mcp.types as mt
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from pollard import AsyncRuntime
from pollard.errors import PolicyViolation, UnsupportedSchema
from pollard.mcp import MCP_VERSION, registry_from_mcp

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "title": "City"}},
    "required": ["city"],
    "title": "get_weatherArguments",
}
SEND_SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
    "required": ["to", "body"],
}


class DictSession:
    """An MCP 1.x-style session: camelCase wire dicts and list_tools(cursor=...)."""

    def __init__(self, pages: list[list[dict[str, Any]]]) -> None:
        self.pages = pages
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.cursors: list[str | None] = []

    async def list_tools(self, cursor: str | None = None) -> dict[str, Any]:
        self.cursors.append(cursor)
        index = 0 if cursor is None else int(cursor)
        following = str(index + 1) if index + 1 < len(self.pages) else None
        return {"tools": self.pages[index], "nextCursor": following}

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, arguments))
        return {
            "content": [{"type": "text", "text": f"{name} ok"}],
            "structuredContent": {"echo": arguments},
            "isError": False,
        }


async def test_registry_from_paged_tool_list_with_async_handlers() -> None:
    session = DictSession(
        [
            [
                {
                    "name": "get_weather",
                    "description": "Weather.",
                    "inputSchema": WEATHER_SCHEMA,
                    "annotations": {"readOnlyHint": True},
                }
            ],
            [
                {"name": "send_email", "inputSchema": SEND_SCHEMA, "title": "Send an email"},
                {"name": "admin_reset", "inputSchema": {"type": "object"}},
            ],
        ]
    )
    # pollard 0.8 treats every tool as writing; an explicit opt-in trusts the server's hints.
    assert all(s.side_effects for s in await registry_from_mcp(session, exclude=["admin_reset"]))
    registry = await registry_from_mcp(session, exclude=["admin_reset"], trust_read_only_hints=True)
    assert session.cursors == [None, "1"] * 2
    assert [spec.name for spec in registry] == ["get_weather", "send_email"]
    weather, send = registry.get("get_weather"), registry.get("send_email")
    assert weather is not None and send is not None
    assert weather.version == send.version == MCP_VERSION
    assert weather.side_effects is False  # the server says read-only
    assert send.side_effects is True  # no hint: assume it writes
    assert send.description == "Send an email"
    assert weather.validate({}) == '$: missing required property "city"'
    assert weather.handler is not None
    result = await weather.handler({"city": "Oslo"})
    # A dict result is recorded as the session returned it (pollard 0.8).
    assert result == {
        "content": [{"type": "text", "text": "get_weather ok"}],
        "structuredContent": {"echo": {"city": "Oslo"}},
        "isError": False,
    }
    assert session.calls == [("get_weather", {"city": "Oslo"})]


async def test_unsupported_tool_schema_fails_closed_naming_the_tool() -> None:
    bad = {
        "name": "grep",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string", "not": {}}}},
    }
    session = DictSession([[bad]])
    with pytest.raises(UnsupportedSchema, match=r"MCP tool 'grep': \$\.properties\.q\.not") as info:
        await registry_from_mcp(session)
    assert info.value.hint is not None and "exclude=['grep']" in info.value.hint
    assert len(await registry_from_mcp(session, exclude={"grep"})) == 0


class TypedSession:
    """An MCP 2.x-style session: real mcp.types objects and list_tools(params=...)."""

    def __init__(self) -> None:
        self.params: list[Any] = []

    async def list_tools(self, *, params: mt.PaginatedRequestParams | None = None) -> Any:
        self.params.append(params)
        if params is None:
            tool = mt.Tool(
                name="get_weather",
                input_schema=WEATHER_SCHEMA,
                annotations=mt.ToolAnnotations(read_only_hint=True),
            )
            return mt.ListToolsResult(tools=[tool], next_cursor="page-2")
        tool = mt.Tool(name="send_email", input_schema=SEND_SCHEMA, description="Send.")
        return mt.ListToolsResult(tools=[tool])

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return mt.CallToolResult(content=[mt.TextContent(type="text", text="boom")], is_error=True)


async def test_real_mcp_types_and_params_pagination() -> None:
    session = TypedSession()
    registry = await registry_from_mcp(session, redaction_key=b"k", trust_read_only_hints=True)
    assert registry.redaction_key == b"k"
    assert session.params[1].cursor == "page-2"
    weather = registry.get("get_weather")
    assert weather is not None and not weather.side_effects
    send = registry.get("send_email")
    assert send is not None and send.side_effects and send.handler is not None
    result = await send.handler({"to": "a", "body": "b"})
    assert result["is_error"] is True
    assert result["content"][0]["text"] == "boom"


async def test_a_real_in_process_mcp_server_through_the_async_firewall() -> None:
    server = MCPServer("pollard-test")

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def shout(text: str, times: int | None = None) -> str:
        """Shout some text."""
        return text.upper() * (times or 1)

    async with Client(server) as client:
        registry = await registry_from_mcp(client.session, trust_read_only_hints=True)
        assert [(s.name, s.side_effects) for s in registry] == [("add", False), ("shout", True)]
        runtime = AsyncRuntime(registry=registry)
        async with runtime, runtime.run("mcp-server") as run:
            added = await run.atool_call("add", {"a": 1, "b": 2})
            with pytest.raises(PolicyViolation, match=r"\$\.b: expected integer, got string"):
                await run.atool_call("add", {"a": 1, "b": "2"})
    assert added.result is not None
    assert added.result["content"][0]["text"] == "3"
    assert added.result["is_error"] is False
