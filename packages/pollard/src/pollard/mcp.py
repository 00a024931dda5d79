"""Build a registry from an MCP session's tools (``pip install "pollard[mcp]"``).

::

    async with ClientSession(read, write) as session:
        await session.initialize()
        registry = await registry_from_mcp(session)
        runtime = AsyncRuntime("runs.db", registry=registry)

Every tool becomes an ``ActionSpec`` with version ``"mcp"``, the tool's input schema (which must fit
the supported subset: a tool whose schema does not is refused when the registry is built, naming
the tool, unless you ``exclude`` it), and an async handler that calls ``session.call_tool`` and
records its result as pollard 0.8 did: the ``CallToolResult``'s ``model_dump()``.
Handlers are coroutines, so use ``AsyncRuntime``.

Every tool is treated as side-effecting, as in pollard 0.8: MCP annotations are hints from the
server, so the safe default is that a tool writes (dry-run mode then records it without calling
it), and the spec digests (so the ids of recorded calls) stay 0.8's. Pass
``trust_read_only_hints=True`` to treat tools the server marks ``readOnlyHint: true`` as
read-only.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from .adapters._common import get, jsonable
from .errors import UnsupportedSchema
from .registry import ActionSpec, Registry

__all__ = ["MCP_VERSION", "registry_from_mcp", "spec_from_mcp_tool"]

MCP_VERSION = "mcp"
"""The version every MCP-derived action carries."""


def _field(obj: object, *names: str) -> Any:
    for name in names:
        value = get(obj, name)
        if value is not None:
            return value
    return None


async def _settle(value: Any) -> Any:
    # pollard 0.8 accepted synchronous sessions too: await only what is awaitable.
    return await value if inspect.isawaitable(value) else value


def _tool_result(result: Any) -> dict[str, Any]:
    """A tool result as pollard 0.8 recorded it (a tool error is a result, not an exception).

    An MCP ``CallToolResult`` is recorded as its ``model_dump()`` (every field, named as the
    installed ``mcp`` names them: ``content``, ``structured_content``, ``is_error``, ``meta``,
    ...), a dict as is; another object as ``{"content", "structured_content", "is_error"}``.
    """
    dump = getattr(result, "model_dump", None)
    if callable(dump):
        data = jsonable(dump())
        if isinstance(data, dict):
            return data
    if isinstance(result, Mapping):
        return {str(key): jsonable(value) for key, value in result.items()}
    return {
        "content": [jsonable(item) for item in _field(result, "content") or []],
        "structured_content": jsonable(_field(result, "structured_content", "structuredContent")),
        "is_error": bool(_field(result, "is_error", "isError")),
    }


def _handler(session: Any, name: str) -> Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]:
    async def call(args: Mapping[str, Any]) -> dict[str, Any]:
        return _tool_result(await _settle(session.call_tool(name, dict(args))))

    call.__name__ = f"mcp_{name}"
    call.__qualname__ = call.__name__
    return call


def spec_from_mcp_tool(
    session: Any, tool: object, *, trust_read_only_hints: bool = False
) -> ActionSpec:
    """Return the ``ActionSpec`` for one MCP tool description.

    Args:
        session: The MCP session the handler calls.
        tool: The tool description (an ``mcp.types.Tool`` or its dict).
        trust_read_only_hints: Treat a tool marked ``readOnlyHint: true`` as free of side
            effects (by default every tool writes, as in pollard 0.8).

    Raises:
        UnsupportedSchema: The tool's input schema is outside the supported subset; the message
            names the tool.
    """
    name = str(_field(tool, "name"))
    schema = jsonable(_field(tool, "input_schema", "inputSchema") or {"type": "object"})
    annotations = _field(tool, "annotations")
    hinted = _field(annotations, "read_only_hint", "readOnlyHint") is True
    read_only = trust_read_only_hints and hinted
    description = _field(tool, "description", "title") or ""
    try:
        return ActionSpec(
            name,
            MCP_VERSION,
            str(description),
            schema,
            not read_only,
            handler=_handler(session, name),
        )
    except UnsupportedSchema as exc:
        raise UnsupportedSchema(
            f"MCP tool {name!r}: {exc.message}",
            exc.path,
            hint=f"pass exclude=[{name!r}] to leave this tool out, or simplify its input schema",
        ) from exc


async def _list_all_tools(session: Any) -> list[Any]:
    parameters = inspect.signature(session.list_tools).parameters
    tools: list[Any] = []
    cursor: str | None = None
    while True:
        if cursor is None:
            page = await _settle(session.list_tools())
        elif "params" in parameters:
            from mcp.types import PaginatedRequestParams

            page = await _settle(session.list_tools(params=PaginatedRequestParams(cursor=cursor)))
        else:
            page = await _settle(session.list_tools(cursor=cursor))
        tools.extend(_field(page, "tools") or [])
        cursor = _field(page, "next_cursor", "nextCursor")
        if not cursor:
            return tools


async def registry_from_mcp(
    session: Any,
    exclude: Iterable[str] | None = None,
    *,
    redaction_key: bytes | None = None,
    trust_read_only_hints: bool = False,
) -> Registry:
    """List an MCP session's tools (every page) and return them as a registry.

    Args:
        session: An initialized ``mcp.ClientSession`` (anything with ``list_tools`` and
            ``call_tool``, async or, as pollard 0.8 allowed, synchronous).
        exclude: Tool names to leave out.
        redaction_key: Passed to :class:`pollard.Registry` (keyed digests of sensitive fields).
        trust_read_only_hints: Treat tools marked ``readOnlyHint: true`` as read-only (dry run
            then executes them). Off by default, as in pollard 0.8: every tool writes.

    Returns:
        A :class:`pollard.Registry` with one async-handler action per tool.

    Raises:
        UnsupportedSchema: A tool's schema is outside the supported subset (naming the tool).
    """
    skipped = set(exclude or ())
    specs = [
        spec_from_mcp_tool(session, tool, trust_read_only_hints=trust_read_only_hints)
        for tool in await _list_all_tools(session)
        if str(_field(tool, "name")) not in skipped
    ]
    return Registry(specs, redaction_key=redaction_key)
