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


@dataclass
class FanOut:
    """Ids of a fan-out run built by `build_fanout`."""

    root: str
    calls: list[str]  # in prompt order (a refused prompt's refusal id)
    refused: list[str]
    failed: list[str]
    retried: list[str]
    fan_in: str
    limit: int  # the run's token budget


def fanout_prompt(index: int) -> str:
    """The (secret) prompt text of fan-out prompt ``index``."""
    return f"{SECRET_PROMPT} for region {index}"


def _iso(ms: int) -> str:
    seconds, millis = divmod(ms, 1000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"2026-01-02T{3 + hours:02d}:{minutes:02d}:{seconds:02d}.{millis:03d}000Z"


def build_fanout(store: Store, prompts: int, *, concurrency: int = 8) -> FanOut:
    """A governed ``pollux run_many``-shaped run built node by node (fast at any size).

    The root records a token budget; ``concurrency`` calls start together; one prompt in 97
    fails (a ``call_failed`` note, prompt 3 first), one in 89 is a second attempt, and the last
    2% are refused once the budget runs out. The fan-in note lists each prompt's node in prompt
    order, as the bridge records it. Nodes are put in an order unrelated to the prompts'.
    """
    cut = prompts - max(1, prompts // 50)
    per_call = 150
    limit = per_call * cut + 10
    root = Node.create(
        NodeKind.ROOT,
        None,
        {"run": "fanout"},
        meta={"created_at": _iso(0), "budget": {"tokens": limit}},
    )
    store.put(root)
    calls: list[str] = []
    refused: list[str] = []
    failed: list[str] = []
    retried: list[str] = []
    nodes: list[Node] = []
    for index in range(prompts):
        slot, lane = divmod(index, concurrency)
        duration = 400 + (index * 37) % 900
        start = slot * 700 + lane * 11
        if index >= cut:
            node = Node.create(
                NodeKind.REFUSAL,
                root.id,
                {
                    "reason": "budget",
                    "meter": "tokens",
                    "requested": str(per_call),
                    "remaining": "10",
                    "blocked_kind": "model_call",
                    "blocked_payload_digest": f"{index:064x}",
                },
                attempt=index - cut,
                meta={"created_at": _iso(start), "limit": limit, "spent": limit - 10},
            )
            refused.append(node.id)
        elif index % 97 == 3:
            node = Node.create(
                NodeKind.NOTE,
                root.id,
                {
                    "event": "call_failed",
                    "kind": "model_call",
                    "attempt": 0,
                    "payload_digest": f"{index:064x}",
                    "error": "APIError",
                },
                meta={
                    "created_at": _iso(start),
                    "duration_s": duration / 1000,
                    "error_type": "APIError",
                    "charges": {"steps": 1, "tokens": 10},
                },
            )
            failed.append(node.id)
        else:
            attempt = 1 if index % 89 == 5 else 0
            cached = 100 if index % 3 == 0 else 0
            usage = {
                "input_tokens": 120,
                "output_tokens": 30,
                "cache_read_tokens": cached,
                "cache_write_tokens": 0 if cached else 20,
            }
            node = Node.create(
                NodeKind.MODEL_CALL,
                root.id,
                {
                    "pollux": 1,
                    "api": "run_many",
                    "provider": "openai",
                    "model": "gpt-5-nano",
                    "environment": {"fingerprint": "f" * 16},
                    "input": {"content": fanout_prompt(index)},
                },
                attempt=attempt,
                result={"text": f"{SECRET_RESULT} ({index})", "usage": usage},
                meta={
                    "created_at": _iso(start),
                    "duration_s": duration / 1000,
                    "usage": usage,
                    "charges": {"steps": 1, "tokens": per_call, "usd": (42 + index % 7) / 100_000},
                },
            )
            if attempt:
                retried.append(node.id)
        calls.append(node.id)
        nodes.append(node)
    for node in sorted(nodes, key=lambda n: n.id):
        store.put(node)
    end = (prompts // concurrency + 2) * 700
    fan_in = Node.create(
        NodeKind.NOTE,
        root.id,
        {"pollux": "run_many", "calls": calls},
        meta={"created_at": _iso(end)},
    )
    store.put(fan_in)
    return FanOut(root.id, calls, refused, failed, retried, fan_in.id, limit)
