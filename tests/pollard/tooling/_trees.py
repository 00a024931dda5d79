"""Sample trees for the tooling tests, built node by node so every marker is present."""

from __future__ import annotations

from dataclasses import dataclass

from pollard import Node, NodeKind, Store
from pollard.redaction import redact

SECRET_PROMPT = "summarise the secret quarterly numbers"
SECRET_RESULT = "the numbers are 42 and 7"
SECRET_TOKEN = "tok-very-secret"


@dataclass
class Sample:
    """Ids of the interesting nodes of the sample run."""

    root: str
    model: str
    anchor: str
    left: str
    tool: str
    refusal: str
    pruned: str
    pruned_child: str


def build_sample(store: Store, label: str = "triage") -> Sample:
    """A run with a model call, a fork, a tool call, a refusal and a pruned branch."""
    root = Node.create(
        NodeKind.ROOT, None, {"run": label}, meta={"created_at": "2026-01-02T03:04:05.000000Z"}
    )
    store.put(root)
    model = Node.create(
        NodeKind.MODEL_CALL,
        root.id,
        {"model": "openai/gpt-5.5", "input": SECRET_PROMPT},
        result={
            "text": SECRET_RESULT,
            "model": "gpt-5.5-2026",
            "usage": {"input_tokens": 40, "output_tokens": 20},
        },
        meta={
            "created_at": "2026-01-02T03:04:06.000000Z",
            "duration_s": 1.5,
            "usage": {"input_tokens": 40, "output_tokens": 20},
            "charges": {"steps": "1", "tokens": "60", "usd": "0.0031"},
        },
    )
    store.put(model)
    anchor = Node.create(
        NodeKind.NOTE,
        model.id,
        {"branch": True},
        meta={"created_at": "2026-01-02T03:04:08.000000Z"},
    )
    store.put(anchor)
    left = Node.create(
        NodeKind.MODEL_CALL,
        anchor.id,
        {"model": "claude-x", "input": SECRET_PROMPT + " again"},
        result={"text": SECRET_RESULT},
        meta={
            "created_at": "2026-01-02T03:04:09.000000Z",
            "duration_s": 0.25,
            "charges": {"steps": "1", "tokens": "75"},
            "avoided": {"tokens": "75"},
        },
    )
    store.put(left)
    tool = Node.create(
        NodeKind.TOOL_CALL,
        left.id,
        {"tool": "send", "version": "1", "args": {"token": redact(SECRET_TOKEN, "api token")}},
        result={"queued": True},
        meta={
            "created_at": "2026-01-02T03:04:10.000000Z",
            "duration_s": 0.01,
            "charges": {"steps": "1"},
        },
    )
    store.put(tool)
    refusal = Node.create(
        NodeKind.REFUSAL,
        anchor.id,
        {
            "reason": "budget",
            "meter": "tokens",
            "requested": "500",
            "remaining": "-35",
            "blocked_kind": "model_call",
            "blocked_payload_digest": "0" * 64,
        },
        meta={"created_at": "2026-01-02T03:04:11.000000Z"},
    )
    store.put(refusal)
    pruned = Node.create(
        NodeKind.NOTE,
        model.id,
        {"status": "draft"},
        meta={"created_at": "2026-01-02T03:04:07.000000Z", "pruned": True},
    )
    store.put(pruned)
    pruned_child = Node.create(
        NodeKind.MODEL_CALL,
        pruned.id,
        {"model": "mock-1", "input": "x"},
        result={"text": "y"},
        meta={
            "created_at": "2026-01-02T03:04:07.500000Z",
            "duration_s": 0.1,
            "charges": {"steps": "1"},
        },
    )
    store.put(pruned_child)
    return Sample(
        root.id, model.id, anchor.id, left.id, tool.id, refusal.id, pruned.id, pruned_child.id
    )
