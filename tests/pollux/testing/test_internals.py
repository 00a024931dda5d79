"""The pieces under the wires: schema generator, strict check, HTTP parsing, import hygiene."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

import pollux.testing
from pollux.testing import Emulator
from pollux.testing._emulator._clock import VirtualClock
from pollux.testing._emulator._model import PrefixCache, count_tokens, truncate_tokens
from pollux.testing._emulator._schema import generate_value, strict_schema_problem

_leaf = st.one_of(
    st.builds(
        lambda lo, extra: {"type": "string", "minLength": lo, "maxLength": lo + extra},
        st.integers(0, 30),
        st.integers(0, 30),
    ),
    st.sampled_from(["date-time", "email", "uuid", "uri", "date", "ipv4"]).map(
        lambda fmt: {"type": "string", "format": fmt}
    ),
    st.builds(
        lambda lo, span, integer: {
            "type": "integer" if integer else "number",
            "minimum": lo,
            "maximum": lo + span,
        },
        st.integers(-1000, 1000),
        st.integers(0, 50),
        st.booleans(),
    ),
    st.builds(
        lambda lo, span: {"type": "integer", "exclusiveMinimum": lo, "exclusiveMaximum": lo + span},
        st.integers(-50, 50),
        st.integers(2, 20),
    ),
    st.builds(
        lambda step: {"type": "number", "multipleOf": step, "minimum": 7},
        st.sampled_from([0.5, 2, 3]),
    ),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.lists(st.text(max_size=5), min_size=1, max_size=4, unique=True).map(lambda v: {"enum": v}),
    st.integers().map(lambda v: {"const": v}),
    st.just({"type": ["string", "null"]}),
)


def _extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.dictionaries(st.from_regex(r"[a-z]{1,8}", fullmatch=True), children, max_size=4).map(
            lambda props: {
                "type": "object",
                "properties": props,
                "required": list(props),
                "additionalProperties": False,
            }
        ),
        st.builds(
            lambda item, lo: {"type": "array", "items": item, "minItems": lo, "maxItems": lo + 2},
            children,
            st.integers(0, 3),
        ),
        st.lists(children, min_size=1, max_size=3).map(lambda options: {"anyOf": options}),
        st.lists(children, min_size=1, max_size=3).map(lambda options: {"oneOf": options[:1]}),
    )


SCHEMAS = st.recursive(_leaf, _extend, max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(SCHEMAS)
def test_generated_values_validate(schema: dict[str, Any]) -> None:
    value = generate_value(schema)
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    json.dumps(value)  # always JSON-encodable


def test_refs_defs_all_of_and_recursion() -> None:
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["name", "children"],
            },
            "base": {
                "type": "object",
                "properties": {"id": {"type": "integer"}},
                "required": ["id"],
            },
        },
        "type": "object",
        "properties": {
            "tree": {"$ref": "#/$defs/node"},
            "merged": {
                "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"x": {"type": "string"}}}]
            },
        },
        "required": ["tree", "merged"],
    }
    value = generate_value(schema)
    jsonschema.validate(value, schema)
    assert value["merged"]["id"] == 1


def test_strict_schema_problems_are_reported_with_context() -> None:
    ok = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {}, "additionalProperties": False, "required": []}
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    assert strict_schema_problem(ok) is None
    nested = json.loads(json.dumps(ok))
    del nested["properties"]["a"]["additionalProperties"]
    problem = strict_schema_problem(nested)
    assert problem is not None and "context=('properties', 'a')" in problem


def test_token_counting_and_truncation() -> None:
    assert count_tokens("Hello, world!") == 4
    assert truncate_tokens("one two, three", 3) == "one two,"
    assert truncate_tokens("short", 10) == "short"
    assert truncate_tokens("anything", 0) == ""


def test_prefix_cache_grows_in_blocks_and_expires() -> None:
    clock = VirtualClock(0)
    cache = PrefixCache(clock, min_tokens=4, block=2, ttl=10)
    tokens = [str(i) for i in range(9)]
    assert cache.lookup_and_store("m", tokens) == 0
    assert cache.lookup_and_store("m", tokens) == 8
    assert cache.lookup_and_store("m", tokens[:5] + ["x"] * 4) == 4
    assert cache.lookup_and_store("other", tokens) == 0
    clock.advance(11)
    assert cache.lookup_and_store("m", tokens[:4]) == 0


def _raw(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload)
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)


def test_raw_http_chunked_body_http10_and_bad_requests(emulator: Emulator) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "chunky"}]}).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    answer = _raw(
        emulator.port,
        b"POST /local/v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"transfer-encoding: chunked\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n"
        + chunked,
    )
    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK")
    assert b"Emulated reply to: chunky" in answer
    old = _raw(emulator.port, b"GET /local/health HTTP/1.0\r\n\r\n")
    assert old.startswith(b"HTTP/1.1 200") and b"connection: close" in old
    bad = _raw(emulator.port, b"NONSENSE\r\n\r\n")
    assert bad.startswith(b"HTTP/1.1 400")
    not_json = _raw(
        emulator.port,
        b"POST /local/v1/chat/completions HTTP/1.1\r\ncontent-type: application/json\r\n"
        b"content-length: 3\r\nconnection: close\r\n\r\n{x}",
    )
    assert not_json.startswith(b"HTTP/1.1 400") and b"could not parse the JSON body" in not_json
    unknown = _raw(emulator.port, b"GET /nowhere HTTP/1.1\r\nconnection: close\r\n\r\n")
    assert unknown.startswith(b"HTTP/1.1 404")


def test_keep_alive_serves_many_requests_on_one_connection(emulator: Emulator) -> None:
    request = b"GET /local/health HTTP/1.1\r\nhost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", emulator.port), timeout=5) as sock:
        sock.sendall(request * 20)  # pipelined, answered in order on one connection
        received = b""
        while received.count(b'{"status":"ok"}') < 20:
            received += sock.recv(65536)
    assert received.count(b"HTTP/1.1 200 OK") == 20
    assert len(emulator.requests) == 20


def test_pollux_testing_imports_no_sdk_and_no_pytest() -> None:
    code = (
        "import sys, json\n"
        "import pollux.testing\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'openai', 'anthropic', 'google', 'pytest', 'pollard', 'h11'})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_public_namespace_is_sorted_and_complete() -> None:
    public = {n for n in dir(pollux.testing) if not n.startswith("_") and n != "annotations"}
    public -= {"fixtures"}  # a submodule, imported only by pytest users
    assert list(pollux.testing.__all__) == sorted(pollux.testing.__all__)
    assert public - {"Iterator", "Any"} <= set(pollux.testing.__all__)
