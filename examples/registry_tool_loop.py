"""An offline tool loop gated by pollard's registry firewall.

A scripted "model" (no network, no keys) asks for tools; every tool call goes through the registry:
a read-only lookup runs, a call to an unregistered tool is refused and recorded, and a refund (a
side-effecting action) waits for a person's confirmation, which this script gives after the
pending call survived in the SQLite store. The API token argument is marked sensitive, so it never
reaches the store. Run it with ``python examples/registry_tool_loop.py``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from pollard import (
    ActionSpec,
    ConfirmationRequired,
    Decision,
    PolicyContext,
    PolicyViolation,
    Registry,
    Runtime,
)

API_TOKEN = "sk-live-example-0000"

INVOICES = {"INV-7": {"amount_cents": 1999, "status": "paid"}}


def lookup_invoice(args: dict[str, Any]) -> dict[str, Any]:
    return {"number": args["number"], **INVOICES.get(args["number"], {"status": "unknown"})}


def refund(args: dict[str, Any]) -> dict[str, Any]:
    assert args["api_token"] == API_TOKEN  # the handler gets the original value
    return {"refunded": args["number"], "amount_cents": INVOICES[args["number"]]["amount_cents"]}


REGISTRY = Registry(
    [
        ActionSpec(
            "lookup_invoice",
            "1",
            "Look up an invoice by number.",
            {
                "type": "object",
                "properties": {"number": {"type": "string", "pattern": "^INV-[0-9]+$"}},
                "required": ["number"],
                "additionalProperties": False,
            },
            False,
            handler=lookup_invoice,
        ),
        ActionSpec(
            "refund",
            "1",
            "Refund a paid invoice.",
            {
                "type": "object",
                "properties": {
                    "number": {"type": "string"},
                    "api_token": {"type": "string", "sensitive": True},
                },
                "required": ["number", "api_token"],
            },
            True,
            handler=refund,
        ),
    ]
)


class ConfirmWrites:
    """Side-effecting actions need a person's confirmation."""

    def decide(self, context: PolicyContext) -> Decision:
        return Decision.CONFIRM if context.spec.side_effects else Decision.ALLOW


SCRIPT = [
    [("lookup_invoice", {"number": "INV-7"})],
    [("delete_everything", {"confirm": True})],
    [("refund", {"number": "INV-7"})],
]


def scripted_model(payload: dict[str, Any]) -> dict[str, Any]:
    """Plays a model: asks for the next scripted tools, then answers with text."""
    turn = sum(1 for m in payload["messages"] if m["role"] == "assistant")
    calls = SCRIPT[turn] if turn < len(SCRIPT) else []
    text = "" if calls else "INV-7 was paid and has been refunded."
    return {
        "text": text,
        "tool_calls": [
            {"id": f"call_{turn}_{i}", "name": name, "arguments": args}
            for i, (name, args) in enumerate(calls)
        ],
        "usage": {"input_tokens": 20 + 10 * turn, "output_tokens": 8},
    }


def run_loop(db: Path) -> str:
    runtime = Runtime(db, registry=REGISTRY, policies=[ConfirmWrites()])
    pending: list[str] = []
    with runtime, runtime.run("refund-desk") as run:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Refund INV-7 if paid."}]
        for _ in range(6):
            reply = run.model_call({"model": "scripted-1", "messages": messages}, fn=scripted_model)
            messages.append({"role": "assistant", "tool_calls": reply.result["tool_calls"]})
            if not reply.result["tool_calls"]:
                return str(reply.result["text"])
            for call in reply.result["tool_calls"]:
                args = dict(call["arguments"])
                if call["name"] == "refund":
                    args["api_token"] = API_TOKEN  # the app adds the secret, never the model
                try:
                    node = run.tool_call(call["name"], args)
                    content: Any = node.result
                except PolicyViolation as refused:
                    print(f"refused and recorded ({refused.refusal_id[:12]}): {refused.detail}")
                    content = {"error": f"refused: {refused.detail}"}
                except ConfirmationRequired as held:
                    print(f"held for confirmation, token {held.resume_token[:12]}...")
                    pending.append(held.resume_token)
                    content = {"status": "waiting for confirmation"}
                messages.append({"role": "tool", "id": call["id"], "content": content})
            if pending:
                break
    # The process could stop here: the pending call is a node in the store. A new runtime on the
    # same file resumes the run, and a person confirms (the secret is passed again by the app).
    approved = Runtime(db, registry=REGISTRY, policies=[ConfirmWrites()])
    with approved, approved.resume("refund-desk") as run:
        done = run.confirm(pending[0], args={"number": "INV-7", "api_token": API_TOKEN})
        print(f"confirmed refund: {json.dumps(done.result, sort_keys=True)}")
        messages.append({"role": "tool", "id": "call_2_0", "content": done.result})
        final = run.model_call({"model": "scripted-1", "messages": messages}, fn=scripted_model)
        print(f"run report: {json.dumps(run.report(), sort_keys=True)}")
    return str(final.result["text"])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "runs.db"
        answer = run_loop(db)
        stored = db.read_bytes() + b"".join(p.read_bytes() for p in Path(tmp).glob("runs.db-*"))
        assert API_TOKEN.encode() not in stored, "the sensitive token must never be stored"
        print(f"model answer: {answer}")
        print("the API token is not in the store: only its digest marker is")


if __name__ == "__main__":
    main()
