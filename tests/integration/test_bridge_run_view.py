"""The run views of a real governed fan-out: prompt-index labels, prompt order, recorded facts."""

from __future__ import annotations

import re
from pathlib import Path

from pollard import AsyncRuntime, Budget, Runtime
from pollard._cli.text import render_tree
from pollard._edge._view import build_view
from pollard.adapters.pollux import governed_run_many
from pollux import Config
from tests.pollard.tooling._cli import pollard

MOCK = Config(provider="openai", model="gpt-5-nano", use_mock=True)
PROMPTS = [f"Summarise region {i} in one line." for i in range(6)]


async def test_pollard_show_labels_fan_out_children_by_prompt_index_in_prompt_order(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        run = rt.run("regions", budget=Budget(steps=4))
        await governed_run_many(run, PROMPTS, config=MOCK)
        calls = run.cursor.payload["calls"]
        root = run.store.get(run.root_id)
        steps = [run.store.get(c) for c in calls]
    # What the views read is recorded: the run's budget, and per step its start, duration
    # and usage (cache reads and writes included).
    assert root.meta["budget"] == {"steps": 4}
    for step in steps[:4]:
        assert step.kind.value == "model_call"
        assert isinstance(step.meta["created_at"], str) and step.meta["duration_s"] >= 0
        assert {"input_tokens", "cache_read_tokens", "cache_write_tokens"} <= set(
            step.meta["usage"]
        )
    assert [s.kind.value for s in steps[4:]] == ["refusal", "refusal"]

    shown = pollard("show", db, "regions")
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    found = [re.search(r"(model_call|refusal) ([0-9a-f]{8}) #(\d+) (\S+)", line) for line in lines]
    labelled = [m.groups() for m in found if m is not None]
    # Every prompt in prompt order (the store walks children by id), refusals included.
    assert [(kind, short, int(index)) for kind, short, index, _ in labelled] == [
        (step.kind.value, step.id[:8], i) for i, step in enumerate(steps)
    ]
    assert [label for *_, label in labelled] == ["gpt-5-nano"] * 4 + ["budget:steps"] * 2
    assert not any("Summarise region" in line for line in lines)  # content-free

    with_payloads = pollard("show", db, "regions", "--payloads")
    first = next(line for line in with_payloads.out.splitlines() if " #0 " in line)
    assert '#0 gpt-5-nano "Summarise region 0 in one line."' in first


def test_the_recorded_budget_leaves_the_run_identity_alone(tmp_path: Path) -> None:
    with Runtime() as rt, rt.run("same") as plain:
        plain_id = plain.root_id
        assert "budget" not in plain.store.get(plain_id).meta
    with Runtime() as rt, rt.run("same", budget=Budget(steps=3)) as budgeted:
        assert budgeted.root_id == plain_id  # meta is not part of a node's id
        assert budgeted.store.get(plain_id).meta["budget"] == {"steps": 3}


def test_a_preview_of_a_redacted_prompt_says_so() -> None:
    from pollard import MemoryStore, Node, NodeKind
    from pollard.redaction import redact

    store = MemoryStore()
    root = Node.create(NodeKind.ROOT, None, {"run": "r"})
    store.put(root)
    secret = Node.create(
        NodeKind.MODEL_CALL,
        root.id,
        {"model": "m", "input": {"content": redact("the secret prompt", "pii")}},
    )
    store.put(secret)
    store.put(Node.create(NodeKind.NOTE, root.id, {"pollux": "run_many", "calls": [secret.id]}))
    text = render_tree(build_view(store.walk(root.id), payloads=True))
    assert "#0 m REDACTED" in text and '"REDACTED"' not in text
    assert "the secret prompt" not in text
