"""Durable approvals in one process: requests, decisions, binding, and what cannot bypass them.

The worker-restart case with real processes (SQLite and PostgreSQL) is in
``test_approvals_processes.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

import pollard
from pollard import (
    ApprovalConflict,
    ApprovalDenied,
    ApprovalPolicy,
    ApprovalRequired,
    AsyncRuntime,
    ConfirmationRequired,
    Decision,
    MemoryStore,
    PolicyContext,
    PolicyViolation,
    Runtime,
    SQLiteStore,
    decide_approval,
    get_approval,
    list_approvals,
    request_approval,
)
from pollard.cli import main
from pollard.registry import Registry

from .conftest import SECRET, Calls, ConfirmWrites, Fixed, make_specs

ARGS = {"to": "ops@example.com", "token": "t-1"}
OTHER = {"to": "x@example.com", "token": "t-1"}


def _ask(run: Any, args: dict[str, Any] = ARGS, actor: Any = "billing") -> str:
    with pytest.raises(ApprovalRequired) as info:
        run.tool_call("send", args, actor=actor)
    return info.value.request_id


def _sends(calls: Calls) -> int:
    return sum(1 for name, _ in calls.log if name == "send")


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_a_call_without_approval_records_a_bound_request_and_names_it(
    registry: Registry, calls: Calls
) -> None:
    with Runtime(registry=registry, policies=[ApprovalPolicy(["send"])]) as rt:
        run = rt.run("r")
        before = run.cursor_id
        with pytest.raises(ApprovalRequired) as info:
            run.tool_call("send", ARGS, actor="billing")
        error = info.value
        assert error.request_id in str(error) and "billing" in str(error)
        assert error.actor == "billing" and error.action == "send@1"
        assert "pollard approve" in (error.hint or "")
        assert run.cursor_id == before  # the call stays where it was asked
        request = rt.store.get(error.request_id)
        payload = request.payload
        assert request.kind.value == "refusal" and request.parent == before
        assert payload["rule"] == "approval_required"
        assert payload["actor"] == "billing"
        assert payload["tool"] == "send" and payload["version"] == "1"
        assert payload["registry_digest"] == registry.registry_digest
        assert payload["spec_digest"] == registry.get("send").spec_digest
        assert payload["args_digest"] == pollard._core._canon.payload_digest(payload["args"])
        # The sensitive argument is a marker in the ledger, never the value.
        assert "t-1" not in json.dumps(payload)
        # Asking again (same call) names the same request; nothing ran.
        assert _ask(run) == error.request_id
        assert _sends(calls) == 0
        pending = list_approvals(rt.store, status="pending")
        assert [a.request_id for a in pending] == [error.request_id]
        assert pending[0].run == "r" and pending[0].status == "pending"


def test_approved_call_runs_once_and_nothing_else_is_approved(
    registry: Registry, calls: Calls
) -> None:
    store = MemoryStore()
    policies = [ApprovalPolicy(["send"])]
    with Runtime(store, registry=registry, policies=policies) as rt:
        request_id = _ask(rt.run("r"))
    approval = decide_approval(store, request_id, "approve", by="ada", reason="checked")
    assert (approval.status, approval.decided_by, approval.reason) == ("approved", "ada", "checked")
    with Runtime(store, registry=registry, policies=policies) as rt:
        run = rt.resume("r")
        assert run.cursor_id == run.root_id  # resume does not stand on the request
        other_args = _ask(run, {"to": "x@example.com", "token": "t-1"})
        other_actor = _ask(run, actor="mallory")
        no_actor = _ask(run, actor=None)
        assert len({request_id, other_args, other_actor, no_actor}) == 4
        node = run.tool_call("send", ARGS, actor="billing")
        assert node.result == {"queued": True, "to": "ops@example.com"}
        assert node.meta["approval"] == request_id
        assert _sends(calls) == 1
        # The same call again at the same point is the same step: served, not run.
        again = rt.run("r").tool_call("send", ARGS, actor="billing")
        assert again.id == node.id and _sends(calls) == 1
    assert get_approval(store, request_id).spent_on == node.id
    assert {a.request_id for a in list_approvals(store, status="pending")} == {
        other_args,
        other_actor,
        no_actor,
    }


def test_the_html_view_marks_approval_requests_with_their_state(registry: Registry) -> None:
    from pollard.html import render_html

    store = MemoryStore()
    with Runtime(store, registry=registry, policies=[ApprovalPolicy(["send"])]) as rt:
        run = rt.run("r")
        approved, denied, pending = (_ask(run, actor=who) for who in ("a", "b", "c"))
        root = run.root_id
    decide_approval(store, approved, "approve", by="ada")
    decide_approval(store, denied, "deny", by="ada")
    page = render_html(store, root)
    found = re.search(r'id="pollard-data">(.*?)</script>', page)
    assert found is not None
    data = json.loads(found.group(1))
    ids = [data["ids"][i * 64 : (i + 1) * 64] for i in range(data["n"])]
    states = {
        ids[i]: data["details"].get(str(i), {}).get("approval")
        for i in range(data["n"])
        if data["flags"][i] & 8192
    }
    assert states == {approved: "approved", denied: "denied", pending: "pending"}
    assert "[APPROVAL:" in page and '<option value="approval">' in page


class _Walks(MemoryStore):
    """A memory store that records which trees were walked."""

    def __init__(self) -> None:
        super().__init__()
        self.walked: list[str] = []

    def walk(self, node_id: str) -> Any:
        self.walked.append(node_id)
        return super().walk(node_id)


def test_listing_one_runs_approvals_walks_that_run_only(registry: Registry) -> None:
    store = _Walks()
    with Runtime(store, registry=registry, policies=[ApprovalPolicy(["send"])]) as rt:
        mine = _ask(rt.run("mine"))
        _ask(rt.run("other"))
        for i in range(3):
            rt.run(f"busy-{i}").note({"i": i})
        root = rt.run("mine").root_id
    store.walked.clear()
    assert [a.request_id for a in list_approvals(store, run="mine")] == [mine]
    assert store.walked == [root]  # not every tree of the store
    assert len(list_approvals(store)) == 2


def test_an_approval_does_not_cover_another_action(calls: Calls) -> None:
    specs = make_specs(calls)
    registry = Registry(specs)
    with Runtime(registry=registry, policies=[ApprovalPolicy(["send", "delete"])]) as rt:
        run = rt.run("r")
        request_id = _ask(run)
        decide_approval(rt.store, request_id, "approve", by="ada")
        with pytest.raises(ApprovalRequired) as info:
            run.tool_call("delete", {}, actor="billing")
        assert info.value.request_id != request_id


def test_a_denied_request_is_a_recorded_refusal(registry: Registry, calls: Calls) -> None:
    with Runtime(registry=registry, policies=[ApprovalPolicy(["send"])]) as rt:
        run = rt.run("r")
        request_id = _ask(run)
        decide_approval(rt.store, request_id, "deny", by="ada", reason="wrong customer")
        with pytest.raises(ApprovalDenied) as info:
            run.tool_call("send", ARGS, actor="billing")
        error = info.value
        assert isinstance(error, PolicyViolation)
        assert error.request_id == request_id and error.decided_by == "ada"
        assert error.reason == "wrong customer" and "wrong customer" in str(error)
        refusal = rt.store.get(error.refusal_id)
        assert refusal.payload["rule"] == "approval_denied"
        assert refusal.payload["request"] == request_id
        assert _sends(calls) == 0


def test_a_decision_is_recorded_once(registry: Registry) -> None:
    with Runtime(registry=registry, policies=[ApprovalPolicy(["send"])]) as rt:
        request_id = _ask(rt.run("r"))
        store = rt.store
        decide_approval(store, request_id, "approve", by="ada")
        with pytest.raises(ApprovalConflict) as info:
            decide_approval(store, request_id, "deny", by="bob")
        assert info.value.status == "approved" and info.value.decided_by == "ada"
        with pytest.raises(ApprovalConflict):
            decide_approval(store, request_id, "approve", by="ada")
        notes = [c for c in store.children(request_id) if c.node.kind.value == "note"]
        assert len(notes) == 1 and notes[0].node.payload["by"] == "ada"
        assert get_approval(store, request_id).status == "approved"


def test_bad_decisions_are_refused_before_anything_is_written(registry: Registry) -> None:
    with Runtime(registry=registry, policies=[ApprovalPolicy(["send"])]) as rt:
        run = rt.run("r")
        request_id = _ask(run)
        store = rt.store
        with pytest.raises(ValueError, match="cannot decide its own request"):
            decide_approval(store, request_id, "approve", by="billing")
        with pytest.raises(ValueError, match="'approve' or 'deny'"):
            decide_approval(store, request_id, "yes", by="ada")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="by="):
            decide_approval(store, request_id, "approve", by=None)
        with pytest.raises(KeyError):
            decide_approval(store, "0" * 64, "approve", by="ada")
        with pytest.raises(ValueError, match="not an approval request"):
            decide_approval(store, run.root_id, "approve", by="ada")
        assert get_approval(store, request_id).status == "pending"


def test_threads_deciding_at_once_record_one_decision(tmp_path: Path, registry: Registry) -> None:
    db = tmp_path / "runs.db"
    with Runtime(db, registry=registry, policies=[ApprovalPolicy(["send"])]) as rt:
        request_id = _ask(rt.run("r"))
    barrier = threading.Barrier(6)
    outcomes: list[str] = []

    def decide(index: int) -> None:
        with SQLiteStore(db) as store:
            barrier.wait()
            try:
                decide_approval(
                    store, request_id, "approve" if index % 2 else "deny", by=f"p{index}"
                )
                outcomes.append("won")
            except ApprovalConflict:
                outcomes.append("conflict")

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["conflict"] * 5 + ["won"]
    with SQLiteStore(db) as store:
        notes = [c for c in store.children(request_id) if c.node.kind.value == "note"]
        assert len(notes) == 1


def test_confirmation_cannot_stand_in_for_a_stored_approval(
    registry: Registry, calls: Calls
) -> None:
    store = MemoryStore()
    # Both policies: the stored approval is asked for first, and no resume token is handed out.
    both = [ApprovalPolicy(["send"]), ConfirmWrites()]
    with Runtime(store, registry=registry, policies=both) as rt:
        run = rt.run("r")
        with pytest.raises(ApprovalRequired):
            run.tool_call("send", ARGS, actor="billing")
    # A token obtained under a confirm-only configuration does not get past the approval policy.
    with Runtime(store, registry=registry, policies=[ConfirmWrites()]) as rt:
        with pytest.raises(ConfirmationRequired) as info:
            rt.run("r").tool_call("send", ARGS, actor="billing")
        token = info.value.resume_token
    with Runtime(store, registry=registry, policies=both) as rt:
        with pytest.raises(ApprovalRequired):
            rt.run("r").confirm(token, args=ARGS)
        # A policy that sees context.confirmed is not satisfied by it either.
        seen = Fixed(Decision.ALLOW)
    with Runtime(store, registry=registry, policies=[seen, ApprovalPolicy(["send"])]) as rt:
        with pytest.raises(ApprovalRequired):
            rt.run("r").confirm(token, args=ARGS)
        assert seen.seen[-1].confirmed is True
    assert _sends(calls) == 0


def test_a_confirmation_cannot_run_an_approved_action_twice(
    registry: Registry, calls: Calls
) -> None:
    both = [ApprovalPolicy(["send"]), ConfirmWrites()]
    with Runtime(registry=registry, policies=both) as rt:
        run = rt.run("r")
        request_id = _ask(run)
        decide_approval(rt.store, request_id, "approve", by="ada")
        # Approved, and the confirm policy still asks for its confirmation: both hold.
        with pytest.raises(ConfirmationRequired) as first:
            run.tool_call("send", ARGS, actor="billing")
        node = run.confirm(first.value.resume_token, args=ARGS)
        assert _sends(calls) == 1
        # A new confirmation of the same call would normally re-run it; an approved action runs
        # once.
        run.rollback(node.parent)
        with pytest.raises(ConfirmationRequired) as second:
            run.tool_call("send", ARGS, actor="billing")
        assert second.value.resume_token != first.value.resume_token
        again = run.confirm(second.value.resume_token, args=ARGS)
        assert again.id == node.id
        assert _sends(calls) == 1


def test_request_approval_asks_ahead_for_exactly_that_call(
    registry: Registry, calls: Calls
) -> None:
    class Agent:
        name = "billing"

    with Runtime(registry=registry, policies=[ApprovalPolicy(["send"])]) as rt:
        run = rt.run("r")
        approval = request_approval(run, "send", ARGS, actor=Agent())
        assert approval.status == "pending" and approval.actor == "billing"
        assert approval.run == "r" and approval.parent_id == run.cursor_id
        assert request_approval(run, "send", ARGS, actor="billing") == approval
        decide_approval(rt.store, approval.request_id, "approve", by="ada")
        node = run.tool_call("send", ARGS, actor=Agent())
        assert node.meta["approval"] == approval.request_id
        assert _sends(calls) == 1
        with pytest.raises(ValueError, match="unknown registered action"):
            request_approval(run, "nope", {})
        with pytest.raises(ValueError, match="schema validation failed"):
            request_approval(run, "send", {"to": "x"})
        with pytest.raises(TypeError, match="actor"):
            request_approval(run, "send", ARGS, actor=42)


def test_async_runs_ask_and_run_approved_calls(registry: Registry, calls: Calls) -> None:
    async def main() -> None:
        store = MemoryStore()
        policies = [ApprovalPolicy(["send"])]
        async with AsyncRuntime(store, registry=registry, policies=policies) as rt:
            run = rt.run("r")
            approval = await pollard.arequest_approval(run, "send", ARGS, actor="billing")
            with pytest.raises(ApprovalRequired) as info:
                await run.atool_call("send", ARGS, actor="billing")
            assert info.value.request_id == approval.request_id
            decide_approval(store, approval.request_id, "approve", by="ada")
            node = await run.atool_call("send", ARGS, actor="billing")
            assert node.result is not None

    asyncio.run(main())
    assert _sends(calls) == 1


def test_approval_policy_matching(registry: Registry, calls: Calls) -> None:
    # Default: every side-effecting action; read-only ones run.
    with Runtime(registry=registry, policies=[ApprovalPolicy()]) as rt:
        run = rt.run("r")
        run.tool_call("lookup", {"number": "INV-1"})
        _ask(run)
    # Only some actors, and a predicate on the call.
    big = ApprovalPolicy(
        ["send"], actors=["intern"], when=lambda c: c.args["to"].endswith("@example.com")
    )
    with Runtime(registry=registry, policies=[big]) as rt:
        run = rt.run("r2")
        run.tool_call("send", ARGS, actor="senior")
        run.tool_call("send", {"to": "a@other.org", "token": "t"}, actor="intern")
        _ask(run, actor="intern")
    # A dry run runs nothing, so it needs no approval.
    with Runtime(registry=registry, policies=[ApprovalPolicy()], dry_run=True) as rt:
        node = rt.run("r3").tool_call("send", ARGS, actor="billing")
        assert node.meta["dry_run"] is True
    with pytest.raises(TypeError):
        ApprovalPolicy("send")
    # A custom policy can ask for a stored approval too, and sees the actor.
    seen = Fixed(Decision.REQUIRE_APPROVAL, name="custom")
    with Runtime(registry=registry, policies=[seen]) as rt:
        with pytest.raises(ApprovalRequired, match="policy custom"):
            rt.run("r4").tool_call("lookup", {"number": "INV-2"}, actor="billing")
        context: PolicyContext = seen.seen[-1]
        assert context.actor == "billing"


def test_the_cli_lists_and_decides_requests(tmp_path: Path, registry: Registry) -> None:
    db = str(tmp_path / "runs.db")
    with Runtime(db, registry=registry, policies=[ApprovalPolicy(["send"])]) as rt:
        run = rt.run("support")
        first = _ask(run)
        second = _ask(run, actor="intern")
    code, out, _ = _cli("approvals", db)
    assert code == 0 and first[:12] in out and second[:12] in out and "pending" in out
    code, out, _ = _cli("approvals", db, "--json")
    listed = json.loads(out)["approvals"]
    assert {a["request_id"] for a in listed} == {first, second}
    assert all(SECRET not in json.dumps(a) and "t-1" not in json.dumps(a) for a in listed)
    code, out, _ = _cli("approve", db, first[:10], "--by", "ada", "--reason", "ok")
    assert code == 0 and out.strip() == f"approved {first} by ada"
    code, out, _ = _cli("deny", db, second, "--by", "ada", "--json")
    assert code == 0 and json.loads(out)["approval"]["status"] == "denied"
    code, _, err = _cli("deny", db, first, "--by", "bob")
    assert code == 2 and "already approved by 'ada'" in err
    code, _, err = _cli("approve", db, second, "--by", "intern")
    assert code == 2
    code, out, _ = _cli("approvals", db)
    assert code == 0 and out.strip() == "no pending approval requests"
    code, out, _ = _cli("approvals", db, "--status", "all", "--json")
    statuses = {a["request_id"]: a["status"] for a in json.loads(out)["approvals"]}
    assert statuses == {first: "approved", second: "denied"}
    code, _, err = _cli("approve", db, "zz", "--by", "ada")
    assert code == 2 and "not an approval request id" in err
    # `pollard show` marks the requests with their state and actor.
    code, out, _ = _cli("show", db, "support")
    assert "by billing [REFUSED] [REDACTED] [APPROVAL:APPROVED]" in out
    assert "by intern [REFUSED] [REDACTED] [APPROVAL:DENIED]" in out
    code, out, _ = _cli("verify", db)
    assert code == 0, out


def test_replay_serves_the_approved_call_and_writes_nothing(
    tmp_path: Path, registry: Registry, calls: Calls
) -> None:
    db = tmp_path / "runs.db"
    policies = [ApprovalPolicy(["send"])]
    with Runtime(db, registry=registry, policies=policies) as rt:
        run = rt.run("r")
        approved = _ask(run)
        pending = _ask(run, OTHER)
    decide_approval(db, approved, "approve", by="ada")
    with Runtime(db, registry=registry, policies=policies) as rt:
        node = rt.run("r").tool_call("send", ARGS, actor="billing")
    with SQLiteStore(db) as store:
        before = sorted(n.id for n in store.walk(store.roots()[0].id))
    with Runtime(db, registry=registry, policies=policies, mode="replay") as rt:
        run = rt.run("r")
        with pytest.raises(ApprovalRequired) as info:
            run.tool_call("send", OTHER, actor="billing")  # still pending, as recorded
        assert info.value.request_id == pending
        assert run.tool_call("send", ARGS, actor="billing").id == node.id
    with SQLiteStore(db) as store:
        assert sorted(n.id for n in store.walk(store.roots()[0].id)) == before
    assert _sends(calls) == 1
    with pytest.raises(FileNotFoundError):
        decide_approval(tmp_path / "missing.db", approved, "approve", by="ada")
    assert not (tmp_path / "missing.db").exists()


def test_requests_and_decisions_are_tamper_evident(tmp_path: Path, registry: Registry) -> None:
    import sqlite3

    db = tmp_path / "runs.db"
    with Runtime(db, registry=registry, policies=[ApprovalPolicy(["send"])]) as rt:
        request_id = _ask(rt.run("r"))
    decide_approval(db, request_id, "deny", by="ada")
    assert _cli("verify", str(db))[0] == 0
    for forged, old, new in [
        ("approval_decided", '"denied"', '"approved"'),  # the decision
        ("approval_required", '"billing"', '"senior"'),  # who asked
    ]:
        copy = tmp_path / f"forged-{forged}.db"
        copy.write_bytes(db.read_bytes())
        with contextlib.closing(sqlite3.connect(copy)) as conn:
            changed = conn.execute(
                "UPDATE nodes SET payload = replace(payload, ?, ?) WHERE payload LIKE ?",
                (old, new, f"%{forged}%"),
            ).rowcount
            conn.commit()
        assert changed == 1
        code, out, _ = _cli("verify", str(copy))
        assert code == 1 and "does not match its content" in out


def test_a_recorded_failure_may_be_retried_under_the_same_approval(calls: Calls) -> None:
    import pollard as p

    keys: list[str] = []

    def flaky(args: dict[str, Any]) -> dict[str, Any]:
        keys.append(p.idempotency_key())
        if len(keys) == 1:
            raise ConnectionError("payment service down")
        return {"queued": True}

    specs = [s for s in make_specs(calls) if s.name != "send"]
    send = next(s for s in make_specs(calls) if s.name == "send")
    registry = Registry([*specs, p.ActionSpec(send.name, "1", "Send.", send.schema, True, flaky)])
    with Runtime(registry=registry, policies=[ApprovalPolicy(["send"])]) as rt:
        run = rt.run("r")
        decide_approval(rt.store, _ask(run), "approve", by="ada")
        with pytest.raises(ConnectionError):
            run.tool_call("send", ARGS, actor="billing")  # failed, and the failure is recorded
        node = run.tool_call("send", ARGS, actor="billing")
    assert keys == [node.id, node.id]  # the same step, the same idempotency key
