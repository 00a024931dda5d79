"""The registry firewall's cost per call, side by side with an unfenced tool call.

A registered call resolves the action, validates and redacts the arguments (one sensitive field),
and, with a policy, reads the run's totals; an unfenced call runs ``fn`` directly. Both record to a
MemoryStore, so the ratio is the firewall's own overhead. Schema validation alone is also timed with
the built-in engine and with the ``jsonschema`` delegate.
"""

from __future__ import annotations

import time
from typing import Any

from bench._result import Result
from pollard import ActionSpec, Decision, PolicyContext, Registry, Runtime
from pollard._governance._schema import compile_schema

CALLS = 2_000
SCHEMA = {
    "type": "object",
    "properties": {
        "number": {"type": "string", "pattern": "^INV-"},
        "token": {"type": "string", "sensitive": True},
        "n": {"type": "integer", "minimum": 0},
    },
    "required": ["number", "token"],
    "additionalProperties": False,
}


def _handler(args: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True}


class _Allow:
    def decide(self, context: PolicyContext) -> Decision:
        return Decision.ALLOW


def _per_call(registry: Registry | None, policies: list[Any]) -> float:
    runtime = Runtime(registry=registry, policies=policies)
    with runtime, runtime.run("bench-governance") as run:
        start = time.perf_counter()
        for i in range(CALLS):
            args = {"number": f"INV-{i}", "token": "secret", "n": i}
            if registry is None:
                run.tool_call("t", args, fn=_handler)
            else:
                run.tool_call("t", args)
        return (time.perf_counter() - start) / CALLS * 1e6


def _validate(engine: Any, count: int) -> float:
    compiled = compile_schema(SCHEMA)
    compiled.validate({"number": "INV-0", "token": "s"}, engine=engine)  # warm up
    start = time.perf_counter()
    for i in range(count):
        compiled.validate({"number": f"INV-{i}", "token": "s", "n": i}, engine=engine)
    return (time.perf_counter() - start) / count * 1e6


def run() -> list[Result]:
    registry = Registry([ActionSpec("t", "1", "", SCHEMA, False, handler=_handler)])
    unfenced = _per_call(None, [])
    registered = _per_call(registry, [])
    with_policy = _per_call(registry, [_Allow()])
    builtin = _validate("builtin", 20_000)
    delegated = _validate("jsonschema", 2_000)
    return [
        Result("tool_call unfenced (MemoryStore)", unfenced, "us/call", direction="lower"),
        Result(
            "tool_call registered (validate + redact)", registered, "us/call", direction="lower"
        ),
        Result("tool_call registered + one policy", with_policy, "us/call", direction="lower"),
        Result(
            "registered / unfenced",
            registered / unfenced,
            "x",
            direction="lower",
            note="the firewall's overhead as a ratio",
        ),
        Result("schema validate, builtin engine", builtin, "us/call", direction="lower"),
        Result("schema validate, jsonschema engine", delegated, "us/call", direction="lower"),
        Result("jsonschema / builtin", delegated / builtin, "x", direction="lower"),
    ]
