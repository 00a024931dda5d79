"""The content-free view: labels and markers for runtime-recorded governance and budget nodes."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from pollard import (
    ActionSpec,
    Budget,
    BudgetExceeded,
    ConfirmationRequired,
    Decision,
    PolicyContext,
    PolicyViolation,
    Registry,
    Runtime,
)
from pollard._cli.text import render_tree
from pollard._edge._view import build_view, format_decimal, node_label

SPEC = ActionSpec(
    "send",
    "1",
    "Send a message.",
    {
        "type": "object",
        "properties": {"to": {"type": "string"}, "token": {"type": "string", "sensitive": True}},
        "required": ["to", "token"],
    },
    True,
    handler=lambda _args: {"queued": True},
)


class _Confirm:
    def decide(self, context: PolicyContext) -> Decision:
        return Decision.CONFIRM


def test_firewall_refusals_and_confirmations_are_labelled() -> None:
    runtime = Runtime(registry=Registry([SPEC]), policies=[_Confirm()])
    with runtime, runtime.run("gov") as run:
        with pytest.raises(PolicyViolation):
            run.tool_call("nope", {"x": 1})
        with pytest.raises(ConfirmationRequired) as asked:
            run.tool_call("send", {"to": "ops", "token": "s3cret-token"})
        run.confirm(asked.value.resume_token, args={"to": "ops", "token": "s3cret-token"})
        text = render_tree(build_view(run.store.walk(run.root_id)))
    lines = text.splitlines()
    assert any("policy:unknown_action nope [REFUSED]" in line for line in lines)
    assert any(
        "policy:confirmation_required send@1 [REFUSED]" in line
        and "[CONFIRMATION:CONFIRMED]" in line
        for line in lines
    )
    assert any("tool_call" in line and "send@1" in line and "[REDACTED]" in line for line in lines)
    assert "s3cret-token" not in text and "ops" not in text


def test_budget_refusals_show_the_meter_and_charges_are_exact() -> None:
    with Runtime() as runtime, runtime.run("money", budget=Budget(tokens=10)) as run:
        fn = lambda _p: {"text": "x", "usage": {"input_tokens": 6, "output_tokens": 6}}  # noqa: E731
        run.model_call({"model": "m", "i": 1}, fn=fn)
        with pytest.raises(BudgetExceeded):
            run.model_call({"model": "m", "i": 2}, fn=fn)
        rows = build_view(run.store.walk(run.root_id))
    refusal = rows[-1]
    assert refusal.kind == "refusal" and refusal.label == "budget:tokens"
    assert refusal.refusal is not None and refusal.refusal["meter"] == "tokens"
    assert rows[1].charges["tokens"] == 12


@pytest.mark.parametrize(
    ("kind", "payload", "label"),
    [
        ("root", {"run": "triage"}, "triage"),
        ("model_call", {"modelId": "anthropic.claude"}, "anthropic.claude"),
        ("model_call", {"model": {"__pollard_redacted": "ab", "hint": None}}, "REDACTED"),
        ("tool_call", {"tool": "search", "args": {}}, "search"),
        ("note", {"branch": True}, "branch"),
        ("note", {"checkpoint": "x" * 100}, "checkpoint=" + "x" * 57 + "..."),
        ("note", {"text": "free text is content"}, ""),
        ("note", ["not", "a", "dict"], ""),
        ("refusal", {"reason": "window", "meter": "requests"}, "window:requests"),
        # Escape sequences and bidi overrides from recorded payloads are printed escaped, so a
        # tool name a model chose cannot repaint the terminal that shows the tree.
        ("tool_call", {"tool": "a\x1b[2Jb\u202ec", "args": {}}, "a\\x1b[2Jb\\u202ec"),
        ("model_call", {"model": "gpt-5.5 café ✓"}, "gpt-5.5 café ✓"),
    ],
)
def test_labels_are_short_and_content_free(kind: str, payload: object, label: str) -> None:
    assert node_label(kind, payload) == label


def test_decimals_print_exactly() -> None:
    from decimal import Decimal

    assert format_decimal(Decimal("1.50")) == "1.5"
    assert format_decimal(Decimal("1E+3")) == "1000"
    assert format_decimal(Decimal("0.0000001")) == "0.0000001"


def test_the_view_counts_every_result_conflict_not_only_the_kept_ones() -> None:
    rt = Runtime()
    ask = {"model": "m", "q": 1}
    for i in range(5):
        rt.run("rerun").model_call(ask, fn=lambda payload, i=i: {"text": f"t{i}"})
    root = rt.store.roots()[0]
    rows = build_view(rt.store.walk(root.id))
    (call,) = [row for row in rows if row.kind == "model_call"]
    assert call.result_conflicts == 4  # two results are kept, four were recorded


def test_the_runs_table_escapes_control_characters_in_labels(tmp_path: Path) -> None:
    from pollard.cli import main

    path = tmp_path / "runs.db"
    with Runtime(path) as runtime:
        runtime.run("ok\x1b]0;owned\x07").note({"status": "x"})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["runs", str(path)]) == 0
    assert "\x1b" not in out.getvalue() and "ok\\x1b]0;owned\\x07" in out.getvalue()
