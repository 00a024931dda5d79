"""Shared fixtures: a registry with a read-only, a side-effecting and a handler-less action."""

from __future__ import annotations

from typing import Any

import pytest

from pollard.policy import Decision, PolicyContext
from pollard.registry import ActionSpec, Registry

SECRET = "hunter2-do-not-store"

LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"number": {"type": "string", "pattern": "^INV-"}},
    "required": ["number"],
    "additionalProperties": False,
}
SEND_SCHEMA = {
    "type": "object",
    "properties": {
        "to": {"type": "string"},
        "token": {"type": "string", "sensitive": True, "description": "API token"},
    },
    "required": ["to", "token"],
}


class Calls:
    """Handlers that record how they were called."""

    def __init__(self) -> None:
        self.log: list[tuple[str, dict[str, Any]]] = []

    def lookup(self, args: dict[str, Any]) -> dict[str, Any]:
        self.log.append(("lookup", args))
        return {"invoice": args["number"], "status": "paid"}

    def send(self, args: dict[str, Any]) -> dict[str, Any]:
        self.log.append(("send", args))
        return {"queued": True, "to": args["to"]}


def make_specs(calls: Calls, *, send_description: str = "Send a message.") -> list[ActionSpec]:
    return [
        ActionSpec(
            "lookup", "1", "Look up an invoice.", LOOKUP_SCHEMA, False, handler=calls.lookup
        ),
        ActionSpec("send", "1", send_description, SEND_SCHEMA, True, handler=calls.send),
        ActionSpec("delete", "1", "Declared, not executable.", {"type": "object"}, True),
    ]


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def registry(calls: Calls) -> Registry:
    return Registry(make_specs(calls))


class Fixed:
    """A policy that always answers the same thing, and remembers what it saw."""

    def __init__(self, decision: Decision, name: str | None = None) -> None:
        self.decision = decision
        self.seen: list[PolicyContext] = []
        if name is not None:
            self.name = name

    def decide(self, context: PolicyContext) -> Decision:
        self.seen.append(context)
        return self.decision


class ConfirmWrites:
    def decide(self, context: PolicyContext) -> Decision:
        return Decision.CONFIRM if context.spec.side_effects else Decision.ALLOW
