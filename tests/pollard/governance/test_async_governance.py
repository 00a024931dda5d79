"""The same firewall under AsyncRuntime: async handlers and policies, MCP tools, aconfirm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pollard import AsyncRuntime, Runtime
from pollard.errors import ConfirmationRequired, PolicyViolation
from pollard.mcp import registry_from_mcp
from pollard.policy import Decision, PolicyContext
from pollard.registry import ActionSpec, Registry

from .conftest import SECRET, Calls, ConfirmWrites, make_specs
from .test_mcp import SEND_SCHEMA, WEATHER_SCHEMA, DictSession

SEND_ARGS = {"to": "ops@example.com", "token": SECRET}


async def test_async_handlers_and_async_policies() -> None:
    seen: list[dict[str, Any]] = []

    async def fetch(args: dict[str, Any]) -> dict[str, Any]:
        seen.append(args)
        return {"page": args["url"]}

    class AsyncAllow:
        async def decide(self, context: PolicyContext) -> Decision:
            return Decision.ALLOW

    registry = Registry(
        [
            ActionSpec(
                "fetch",
                "1",
                "Fetch.",
                {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
                False,
                handler=fetch,
            )
        ]
    )
    runtime = AsyncRuntime(registry=registry, policies=[AsyncAllow()])
    async with runtime, runtime.run("async") as run:
        node = await run.atool_call("fetch", {"url": "https://example.com"})
        with pytest.raises(PolicyViolation, match="schema validation failed"):
            await run.atool_call("fetch", {})
    assert node.result == {"page": "https://example.com"}
    assert seen == [{"url": "https://example.com"}]


def test_an_async_policy_under_the_sync_runtime_is_a_type_error(registry: Registry) -> None:
    class AsyncAllow:
        async def decide(self, context: PolicyContext) -> Decision:
            return Decision.ALLOW

    runtime = Runtime(registry=registry, policies=[AsyncAllow()])
    with runtime.run("sync") as run, pytest.raises(TypeError, match="AsyncRuntime"):
        run.tool_call("lookup", {"number": "INV-1"})


async def test_mcp_tools_run_through_the_async_firewall() -> None:
    session = DictSession(
        [
            [
                {
                    "name": "get_weather",
                    "inputSchema": WEATHER_SCHEMA,
                    "annotations": {"readOnlyHint": True},
                },
                {"name": "send_email", "inputSchema": SEND_SCHEMA},
            ]
        ]
    )
    registry = await registry_from_mcp(session, trust_read_only_hints=True)
    runtime = AsyncRuntime(registry=registry, dry_run=True)
    async with runtime, runtime.run("mcp") as run:
        weather = await run.atool_call("get_weather", {"city": "Oslo"})
        email = await run.atool_call("send_email", {"to": "a@b.c", "body": "hi"})
        with pytest.raises(PolicyViolation, match="unknown registered action"):
            await run.atool_call("delete_repo", {})
    assert weather.result is not None and weather.result["isError"] is False
    assert weather.payload["version"] == "mcp"
    assert email.meta["dry_run"] is True  # a writing tool is only recorded in dry run
    assert session.calls == [("get_weather", {"city": "Oslo"})]


async def test_aconfirm_across_a_restart_on_sqlite(tmp_path: Path, calls: Calls) -> None:
    db = tmp_path / "runs.db"
    registry = Registry(make_specs(calls))
    runtime = AsyncRuntime(db, registry=registry, policies=[ConfirmWrites()])
    async with runtime, runtime.run("async-restart") as run:
        with pytest.raises(ConfirmationRequired) as info:
            await run.atool_call("send", SEND_ARGS)
    token = info.value.resume_token
    runtime = AsyncRuntime(db, registry=registry, policies=[ConfirmWrites()])
    async with runtime, runtime.resume("async-restart") as run:
        node = await run.aconfirm(token, args=SEND_ARGS)
    assert node.result == {"queued": True, "to": "ops@example.com"}
    assert calls.log == [("send", SEND_ARGS)]
    assert SECRET.encode() not in b"".join(p.read_bytes() for p in tmp_path.glob("runs.db*"))
