"""The registry firewall: every refusal path, policies, redaction and identity stability."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from pollard import Budget, Runtime
from pollard._core._canon import payload_digest
from pollard.errors import BudgetExceeded, ConfirmationRequired, IntegrityError, PolicyViolation
from pollard.policy import Decision
from pollard.registry import ActionSpec, Registry
from pollard.stores.memory import MemoryStore

from .conftest import SECRET, Calls, ConfirmWrites, Fixed, make_specs

SEND_ARGS = {"to": "ops@example.com", "token": SECRET}


def all_bytes(store: MemoryStore, root_id: str) -> str:
    return json.dumps([[n.payload, n.result, n.meta] for n in store.walk(root_id)])


def refusal_of(run: Any, error: PolicyViolation) -> Any:
    node = run.store.get(error.refusal_id)
    assert node.kind.value == "refusal"
    assert run.cursor_id == node.id  # the cursor moves onto the refusal
    return node


def test_a_registered_call_runs_the_handler_with_originals_and_records_redacted(
    registry: Registry, calls: Calls
) -> None:
    never = []
    with Runtime(registry=registry).run("ok") as run:
        node = run.tool_call("send", SEND_ARGS, fn=lambda a: never.append(a))
        assert calls.log == [("send", SEND_ARGS)]
        assert never == []  # a caller-supplied function never runs under a registry
        assert node.result == {"queued": True, "to": "ops@example.com"}
        spec = registry.get("send")
        assert spec is not None
        assert node.payload["tool"] == "send" and node.payload["version"] == "1"
        assert node.payload["spec_digest"] == spec.spec_digest
        assert set(node.payload) == {"tool", "version", "args", "spec_digest"}
        marker = node.payload["args"]["token"]
        assert marker["hint"] == "sensitive" and "__pollard_redacted" in marker
        assert node.meta["registry_digest"] == registry.registry_digest
        assert SECRET not in all_bytes(run.store, run.root_id)


def test_unknown_action_is_refused_without_storing_its_arguments(registry: Registry) -> None:
    with Runtime(registry=registry).run("unknown") as run:
        with pytest.raises(PolicyViolation, match="unknown registered action: wipe@2") as info:
            run.tool_call("wipe", {"password": SECRET}, version="2")
        refusal = refusal_of(run, info.value)
        assert refusal.payload["rule"] == "unknown_action"
        assert refusal.payload["reason"] == "policy"
        assert refusal.payload["blocked_kind"] == "tool_call"
        assert refusal.payload["tool"] == "wipe"
        assert refusal.meta["registry_digest"] == registry.registry_digest
        assert info.value.detail == "unknown registered action: wipe@2"
        assert SECRET not in all_bytes(run.store, run.root_id)
        # Guessing the arguments from the digest needs the whole canonical object, not a field.
        naive = payload_digest({"tool": "wipe", "version": "2", "args": {"password": SECRET}})
        assert refusal.payload["blocked_payload_digest"] != naive


def test_version_mismatch_is_refused(registry: Registry, calls: Calls) -> None:
    with Runtime(registry=registry).run("version") as run:
        with pytest.raises(PolicyViolation, match="requested 2, registered 1") as info:
            run.tool_call("send", SEND_ARGS, version="2")
        assert refusal_of(run, info.value).payload["rule"] == "version_mismatch"
        assert SECRET not in all_bytes(run.store, run.root_id)
        run.rollback()
        assert run.tool_call("send", SEND_ARGS, version="1").result is not None
    assert [name for name, _ in calls.log] == ["send"]


@pytest.mark.parametrize(
    ("name", "args", "finding"),
    [
        ("lookup", {"number": "X-1"}, '$.number: does not match the pattern "^INV-"'),
        ("lookup", {"number": "INV-1", "extra": SECRET}, '$: unexpected property "extra"'),
        ("send", {"to": "a", "token": 12345}, "$.token: expected string, got integer"),
        ("send", {"token": SECRET}, '$: missing required property "to"'),
    ],
)
def test_invalid_arguments_are_refused_with_the_first_finding(
    registry: Registry, calls: Calls, name: str, args: dict[str, Any], finding: str
) -> None:
    with Runtime(registry=registry).run("invalid") as run:
        with pytest.raises(PolicyViolation) as info:
            run.tool_call(name, args)
        refusal = refusal_of(run, info.value)
        assert refusal.payload["rule"] == "invalid_args"
        assert refusal.payload["detail"] == f"schema validation failed: {finding}"
        assert SECRET not in all_bytes(run.store, run.root_id)
        assert "12345" not in refusal.payload["detail"]
    assert calls.log == []


def test_a_declared_action_without_handler_is_refused(registry: Registry) -> None:
    with Runtime(registry=registry).run("nohandler") as run:
        with pytest.raises(PolicyViolation, match="has no handler") as info:
            run.tool_call("delete", {})
        assert refusal_of(run, info.value).payload["rule"] == "no_handler"


def test_policy_denial_names_the_policy_and_sees_the_originals(
    registry: Registry, calls: Calls
) -> None:
    deny = Fixed(Decision.DENY, name="no-sends")
    with Runtime(registry=registry, policies=[deny]).run("deny") as run:
        with pytest.raises(PolicyViolation, match="denied by policy no-sends") as info:
            run.tool_call("send", SEND_ARGS)
        refusal = refusal_of(run, info.value)
        assert refusal.payload["rule"] == "denied"
        assert SECRET not in all_bytes(run.store, run.root_id)
    context = deny.seen[0]
    assert context.args == SEND_ARGS  # policies see the original values
    assert context.run_label == "deny" and not context.confirmed and not context.dry_run
    assert calls.log == []


def test_first_deny_wins_over_any_confirm(registry: Registry) -> None:
    policies = [Fixed(Decision.CONFIRM), Fixed(Decision.ALLOW), Fixed(Decision.DENY)]
    runtime = Runtime(registry=registry, policies=policies)
    with runtime.run("order") as run, pytest.raises(PolicyViolation, match="by policy Fixed"):
        run.tool_call("send", SEND_ARGS)


def test_policy_counters_are_what_the_run_spent(registry: Registry) -> None:
    seen = Fixed(Decision.ALLOW)
    with Runtime(registry=registry, policies=[seen]).run("counters") as run:
        run.tool_call("lookup", {"number": "INV-1"})
        run.tool_call("lookup", {"number": "INV-2"})
    assert seen.seen[0].counters.get("steps", Decimal(0)) == 0
    assert seen.seen[1].counters["steps"] == Decimal(1)


def test_a_policy_answer_must_be_a_decision(registry: Registry) -> None:
    class Sloppy:
        def decide(self, context: Any) -> Any:
            return "maybe"

    runtime = Runtime(registry=registry, policies=[Sloppy()])
    with runtime.run("sloppy") as run, pytest.raises(TypeError, match=r"Decision\.ALLOW"):
        run.tool_call("lookup", {"number": "INV-1"})


def test_an_async_handler_under_the_sync_runtime_is_refused_before_dispatch() -> None:
    async def handler(args: dict[str, Any]) -> dict[str, Any]:
        return {}

    registry = Registry([ActionSpec("a", "1", "", {"type": "object"}, False, handler=handler)])
    with Runtime(registry=registry).run("async") as run:
        root = run.cursor_id
        with pytest.raises(TypeError, match="AsyncRuntime"):
            run.tool_call("a", {})
        assert run.store.children(root) == []  # nothing ran, nothing recorded


def test_arguments_must_be_a_json_object(registry: Registry) -> None:
    with Runtime(registry=registry).run("types") as run:
        with pytest.raises(TypeError, match="must be a dict"):
            run.tool_call("lookup", ["INV-1"])
        with pytest.raises(TypeError, match=r"\$\.number"):
            run.tool_call("lookup", {"number": ("INV", 1)})


def test_hmac_key_changes_markers_and_ids(calls: Calls) -> None:
    plain = Registry(make_specs(calls))
    keyed = Registry(make_specs(calls), redaction_key=b"k" * 32)
    assert keyed.registry_digest == plain.registry_digest  # the key is never digested
    ids = []
    for registry in (plain, keyed):
        with Runtime(registry=registry).run("hmac") as run:
            node = run.tool_call("send", SEND_ARGS)
            ids.append(node.id)
            marker = node.payload["args"]["token"]["__pollard_redacted"]
            assert marker.startswith("hmac-sha256:") == (registry is keyed)
    assert ids[0] != ids[1]


# -- identity stability ----------------------------------------------------------------------


def test_unrelated_registry_edits_keep_recorded_ids() -> None:
    first = Calls()
    with Runtime(MemoryStore(), registry=Registry(make_specs(first))).run("stable") as run:
        recorded = run.tool_call("send", SEND_ARGS)
    # An unrelated action is added and this action's description is edited.
    second = Calls()
    extra = ActionSpec("ping", "1", "Ping.", {"type": "object"}, False, handler=lambda a: {})
    edited = Registry([*make_specs(second, send_description="Send it, politely."), extra])
    assert edited.registry_digest != Registry(make_specs(first)).registry_digest
    assert edited.get("send").spec_digest == recorded.payload["spec_digest"]
    with Runtime(MemoryStore(), registry=edited).run("stable") as run:
        again = run.tool_call("send", SEND_ARGS)
    assert again.id == recorded.id


def test_a_run_bound_to_one_registry_is_not_reopened_under_another() -> None:
    # pollard 0.8: "run root is already bound to a different registry", in every mode.
    store = MemoryStore()
    first = Registry(make_specs(Calls()))
    with Runtime(store, registry=first).run("bound") as run:
        run.tool_call("send", SEND_ARGS)
    extra = ActionSpec("ping", "1", "Ping.", {"type": "object"}, False, handler=lambda a: {})
    other = Registry([*make_specs(Calls()), extra])
    for mode in ("record", "hybrid", "replay"):
        with (
            pytest.raises(IntegrityError, match="already bound to a different registry"),
            Runtime(store, registry=other, mode=mode).run("bound"),
        ):
            pass
    with Runtime(store, registry=first, mode="replay").run("bound"):
        pass  # the same registry re-opens it
    with Runtime(store).run("bound"):
        pass  # so does a runtime without a registry, as in 0.8
    root = store.roots()[0]
    assert root.meta["registry_digest"] == first.registry_digest


def test_a_semantic_spec_change_changes_the_call_ids() -> None:
    store = MemoryStore()
    calls = Calls()
    with Runtime(store, registry=Registry(make_specs(calls))).run("change") as run:
        before = run.tool_call("lookup", {"number": "INV-1"})
    tightened = dict(
        make_specs(calls)[0].schema,
        properties={"number": {"type": "string", "pattern": "^INV-", "maxLength": 12}},
    )
    changed = Registry(
        [ActionSpec("lookup", "1", "Look up.", tightened, False, handler=calls.lookup)]
    )
    with Runtime(MemoryStore(), registry=changed).run("change") as run:
        after = run.tool_call("lookup", {"number": "INV-1"})
    assert after.id != before.id  # same label, same parent: only the spec digest differs
    assert len(calls.log) == 2


# -- replay of governed outcomes -----------------------------------------------------------------


def test_replay_reproduces_a_recorded_denial_and_serves_confirmed_calls(
    registry: Registry, calls: Calls
) -> None:
    store = MemoryStore()
    with Runtime(store, registry=registry, policies=[ConfirmWrites()]).run("replay") as run:
        with pytest.raises(ConfirmationRequired) as info:
            run.tool_call("send", SEND_ARGS)
        confirmed = run.confirm(info.value.resume_token)
        with pytest.raises(PolicyViolation):
            run.tool_call("wipe", {})
    assert len(calls.log) == 1
    with Runtime(store, registry=registry, policies=[ConfirmWrites()], mode="replay").run(
        "replay"
    ) as run:
        # The recorded confirmation is served: no new ConfirmationRequired, no handler call.
        assert run.tool_call("send", SEND_ARGS).id == confirmed.id
        with pytest.raises(PolicyViolation, match="unknown registered action"):
            run.tool_call("wipe", {})
    assert len(calls.log) == 1


def test_budgets_gate_registered_calls_like_any_step(registry: Registry, calls: Calls) -> None:
    with Runtime(registry=registry).run("budget", budget=Budget(steps=1)) as run:
        run.tool_call("lookup", {"number": "INV-1"})
        with pytest.raises(BudgetExceeded) as info:
            run.tool_call("lookup", {"number": "INV-2"})
        assert run.store.get(info.value.refusal_id).payload["meter"] == "steps"
    assert len(calls.log) == 1
