"""Durable confirmation and dry run: tokens are refusal nodes, confirm honours dry run."""

from __future__ import annotations

from typing import Any

import pytest

from pollard import Runtime
from pollard.errors import ConfirmationRequired, IntegrityError, PolicyViolation
from pollard.policy import Decision, PolicyContext
from pollard.registry import ActionSpec, Registry
from pollard.stores.memory import MemoryStore

from .conftest import SECRET, Calls, ConfirmWrites, Fixed, make_specs

SEND_ARGS = {"to": "ops@example.com", "token": SECRET}
LOOKUP_ARGS = {"number": "INV-7"}


def ask(run: Any, name: str, args: dict[str, Any]) -> str:
    with pytest.raises(ConfirmationRequired) as info:
        run.tool_call(name, args)
    assert info.value.hint and "run.confirm" in info.value.hint
    return info.value.resume_token


def test_confirmation_is_a_recorded_refusal_and_confirm_runs_the_call_once(
    registry: Registry, calls: Calls
) -> None:
    with Runtime(registry=registry, policies=[ConfirmWrites()]).run("confirm") as run:
        assert run.tool_call("lookup", LOOKUP_ARGS).result is not None  # read-only: allowed
        asked_from = run.cursor_id
        token = ask(run, "send", SEND_ARGS)
        refusal = run.store.get(token)
        # The request is recorded, and the cursor stays where the call was asked (pollard 0.8).
        assert run.cursor_id == asked_from and refusal.parent == asked_from
        assert refusal.payload["rule"] == "confirmation_required"
        assert refusal.payload["args"]["token"]["hint"] == "sensitive"
        assert refusal.payload["args"]["to"] == "ops@example.com"
        assert calls.log == [("lookup", LOOKUP_ARGS)]

        node = run.confirm(token)
        assert calls.log[-1] == ("send", SEND_ARGS)  # the handler got the original secret
        assert node.parent == asked_from  # recorded where the call was asked
        assert run.cursor_id == node.id
        assert run.store.get(token).meta["confirmation"] == {
            "status": "confirmed",
            "node_id": node.id,
        }
        with pytest.raises(KeyError, match="already used"):
            run.confirm(token)  # single-use: the handler does not run twice
        assert len(calls.log) == 2


def test_confirm_asks_policies_again_and_a_deny_still_refuses(registry: Registry) -> None:
    class ConfirmThenDeny:
        def decide(self, context: PolicyContext) -> Decision:
            return Decision.DENY if context.confirmed else Decision.CONFIRM

    with Runtime(registry=registry, policies=[ConfirmThenDeny()]).run("redeny") as run:
        token = ask(run, "send", SEND_ARGS)
        with pytest.raises(PolicyViolation, match="denied by policy ConfirmThenDeny"):
            run.confirm(token)


def test_confirmation_survives_a_new_runtime_on_the_same_store(
    registry: Registry, calls: Calls
) -> None:
    store = MemoryStore()
    policies = [Fixed(Decision.CONFIRM)]
    with Runtime(store, registry=registry, policies=policies).run("durable") as run:
        token = ask(run, "lookup", LOOKUP_ARGS)
    # A fresh runtime (the process restarted) has no memory of the pending call; the store has
    # it, and without sensitive fields the recorded arguments are the originals.
    with Runtime(store, registry=registry, policies=policies).resume("durable") as run:
        node = run.confirm(token)
    assert node.result == {"invoice": "INV-7", "status": "paid"}
    assert calls.log == [("lookup", LOOKUP_ARGS)]


def test_sensitive_arguments_are_not_recoverable_from_the_store(registry: Registry) -> None:
    store = MemoryStore()
    with Runtime(store, registry=registry, policies=[ConfirmWrites()]).run("secret") as run:
        token = ask(run, "send", SEND_ARGS)
    runtime = Runtime(store, registry=registry, policies=[ConfirmWrites()])
    with runtime.resume("secret") as run, pytest.raises(ValueError, match="pass them again"):
        run.confirm(token)


def test_confirm_refuses_when_the_action_changed(calls: Calls) -> None:
    store = MemoryStore()
    with Runtime(store, registry=Registry(make_specs(calls)), policies=[ConfirmWrites()]).run(
        "changed"
    ) as run:
        token = ask(run, "send", SEND_ARGS)
    stricter = dict(make_specs(calls)[1].schema, additionalProperties=False)
    changed = Registry([ActionSpec("send", "1", "Send.", stricter, True, handler=calls.send)])
    # The run is bound to the registry it asked under (pollard 0.8): another one cannot reopen
    # it, so the changed action can never be confirmed with the old request.
    with (
        pytest.raises(IntegrityError, match="already bound to a different registry"),
        Runtime(store, registry=changed).resume("changed") as run,
    ):
        run.confirm(token)
    assert calls.log == []


def test_an_unknown_token_is_a_clear_error(registry: Registry) -> None:
    with Runtime(registry=registry).run("bad-token") as run:
        with pytest.raises(ValueError, match="not a pending confirmation"):
            run.confirm("0" * 64)
        with pytest.raises(ValueError, match="not a pending confirmation"):
            run.confirm(run.root_id)


def test_a_confirmed_request_asked_again_gets_a_new_token(registry: Registry, calls: Calls) -> None:
    with Runtime(registry=registry, policies=[ConfirmWrites()]).run("again") as run:
        first = ask(run, "send", SEND_ARGS)
        run.confirm(first)
        run.rollback(steps=1)
        second = ask(run, "send", SEND_ARGS)
        assert second != first
        run.confirm(second)
    assert [name for name, _ in calls.log] == ["send", "send"]


# -- dry run ---------------------------------------------------------------------------------


def test_dry_run_records_side_effects_without_calling_handlers(
    registry: Registry, calls: Calls
) -> None:
    with Runtime(registry=registry, dry_run=True).run("dry") as run:
        read = run.tool_call("lookup", LOOKUP_ARGS)
        write = run.tool_call("send", SEND_ARGS)
        declared = run.tool_call("delete", {})  # a dry run needs no handler
    assert read.result is not None and not read.meta.get("dry_run")
    assert write.result is None and write.meta["dry_run"] is True
    assert write.payload["dry_run"] is True
    assert write.payload["args"]["token"]["hint"] == "sensitive"
    assert declared.meta["dry_run"] is True
    assert calls.log == [("lookup", LOOKUP_ARGS)]


def test_dry_run_identity_never_collides_with_the_real_call(registry: Registry) -> None:
    store = MemoryStore()
    with Runtime(store, registry=registry, dry_run=True).run("ids") as run:
        dry = run.tool_call("send", SEND_ARGS)
    with Runtime(store, registry=registry, mode="hybrid").run("ids") as run:
        real = run.tool_call("send", SEND_ARGS)
    assert real.id != dry.id and real.result is not None


def test_confirm_honours_dry_run(registry: Registry, calls: Calls) -> None:
    store = MemoryStore()
    policies = [ConfirmWrites()]
    with Runtime(store, registry=registry, policies=policies, dry_run=True).run("dryconf") as run:
        token = ask(run, "send", SEND_ARGS)
        node = run.confirm(token)
    assert node.meta["dry_run"] is True and node.result is None
    assert calls.log == []
    # A call asked by a live runtime and confirmed after a restart under dry run is only recorded.
    with Runtime(store, registry=registry, policies=policies).run("live") as run:
        token = ask(run, "send", SEND_ARGS)
    with Runtime(store, registry=registry, policies=policies, dry_run=True).resume("live") as run:
        assert run.confirm(token, args=SEND_ARGS).meta["dry_run"] is True
    assert calls.log == []


def test_policies_see_dry_run(registry: Registry) -> None:
    seen = Fixed(Decision.ALLOW)
    with Runtime(registry=registry, policies=[seen], dry_run=True).run("dryctx") as run:
        run.tool_call("send", SEND_ARGS)
    assert seen.seen[0].dry_run is True


def test_a_token_from_another_run_is_refused(registry: Registry, calls: Calls) -> None:
    store = MemoryStore()
    runtime = Runtime(store, registry=registry, policies=[ConfirmWrites()])
    with runtime.run("a") as run:
        token = ask(run, "send", SEND_ARGS)
    with runtime.run("b") as other, pytest.raises(ValueError, match="not in run 'b'"):
        other.confirm(token)
    assert calls.log == []
