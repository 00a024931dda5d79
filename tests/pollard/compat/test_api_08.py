"""Code written against pollard 0.8.0's public API keeps working (issue 24, API half).

Each expectation was observed on the released ``pollard==0.8.0`` run as a black box.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

from pollard import AsyncRuntime, MemoryStore, Node, Runtime, gc, seal
from pollard.errors import ConfirmationRequired, IntegrityError, UnsupportedSchema
from pollard.meters import TokenMeter, WindowMeter
from pollard.policy import Decision, PolicyContext
from pollard.registry import ActionSpec, Registry

SCHEMA = {
    "type": "object",
    "properties": {"token": {"type": "string", "sensitive": True}, "n": {"type": "integer"}},
    "required": ["token"],
}


def _spec(name: str = "send") -> ActionSpec:
    return ActionSpec(name, "1", "Send.", SCHEMA, True, handler=lambda args: {"sent": True})


def test_node_make_is_a_deprecated_alias_of_create() -> None:
    root = Node.create("root", None, {"run": "x"})
    with pytest.warns(DeprecationWarning, match=r"Node\.create"):
        made = Node.make(
            kind="note", parent=root.id, payload={"a": 1}, attempt=2, result={"r": 1}, meta={"m": 1}
        )
    created = Node.create("note", root.id, {"a": 1}, attempt=2, result={"r": 1}, meta={"m": 1})
    assert (made.id, made.result_digest, made.meta) == (created.id, created.result_digest, {"m": 1})
    with pytest.raises(TypeError):
        Node.make("root", None, {"a": 1})  # type: ignore[misc]  # keyword-only, as in 0.8


def test_expected_id_is_a_property_and_the_call_form_warns() -> None:
    node = Node.create("root", None, {"run": "x"})
    assert node.expected_id == node.id and isinstance(node.expected_id, str)
    with pytest.warns(DeprecationWarning, match="property"):
        assert node.expected_id() == node.id  # type: ignore[operator]


def test_gc_report_lists_the_removed_ids_sorted() -> None:
    store = MemoryStore()
    with Runtime(store).run("g") as run:
        run.note({"keep": 1})
        branch = run.branch()
        branch.note({"drop": 1})
        branch.note({"drop": 2})
        branch.prune()
        pruned = {n.id for n in store.walk(run.root_id) if n.payload != {"run": "g"}} - {
            run.cursor_id
        }
    report = gc(store, mode="drop-pruned")
    assert isinstance(report.removed_nodes, tuple)
    assert list(report.removed_nodes) == sorted(report.removed_nodes)
    assert report.removed_count == len(report.removed_nodes) >= 1
    assert set(report.removed_nodes) <= pruned
    as_json = report.to_dict()
    assert as_json["removed_nodes"] == report.removed_count  # 0.8's JSON: a count
    assert as_json["removed_node_ids"] == list(report.removed_nodes)


def test_seal_entries_carry_0_8_fields() -> None:
    with Runtime().run("audit") as run:
        note = run.note({"status": "ready"})
        report = seal(run.store, run.root_id)
    first, second = report.entries
    assert (first.parent_id, first.kind, first.result_digest, first.previous) == (
        None,
        "root",
        None,
        None,
    )
    assert (second.node_id, second.parent_id, second.kind) == (note.id, run.root_id, "note")
    assert second.previous == first.seal and second.seal == report.digest == second.digest
    assert set(second.to_dict()) == {
        "index",
        "node_id",
        "parent_id",
        "kind",
        "result_digest",
        "previous",
        "seal",
    }


def test_action_spec_validate_args_and_one_argument_redact_args() -> None:
    spec = _spec()
    assert spec.validate_args({"token": "x"}) is None
    assert spec.validate_args({"token": 1}) == spec.validate({"token": 1})
    assert spec.validate_args({}) is not None
    redacted: Any = spec.redact_args({"token": "secret", "n": 3})
    # 0.8's exact marker: plain SHA-256, no hint.
    digest = "37ceab1d3dcc586adcc454c3077b39c0bc7744decebe6557f99af6de05d7d05a"
    assert redacted == {"token": {"__pollard_redacted": digest, "hint": None}, "n": 3}


def test_registry_get_of_an_unknown_name_or_version_raises_key_error() -> None:
    registry = Registry([_spec()])
    assert registry.get("send").name == "send" and registry.get("send", "1").version == "1"
    with pytest.raises(KeyError, match="nope"):
        registry.get("nope")
    with pytest.raises(KeyError, match="send@2"):
        registry.get("send", "2")
    assert registry.find("send", "2") is None


@pytest.mark.parametrize("root", [{"type": "number"}, {"type": "string"}, {"type": "array"}])
def test_a_non_object_root_schema_is_refused_at_registration(root: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedSchema, match="root schema must describe an object"):
        ActionSpec("x", "1", "d", root, False)


def test_reopening_a_label_under_another_registry_is_refused() -> None:
    store = MemoryStore()
    with Runtime(store, registry=Registry([_spec()])).run("lab") as run:
        run.tool_call("send", {"token": "t"})
    other = Registry([_spec(), _spec("other")])
    with (
        pytest.raises(IntegrityError, match="already bound to a different registry"),
        Runtime(store, registry=other).run("lab"),
    ):
        pass


def test_unregistered_tool_call_fn_receives_the_whole_payload() -> None:
    seen: list[Any] = []
    with Runtime().run("t") as run:
        node = run.tool_call("echo", {"a": 1}, fn=lambda p: seen.append(p) or {"ok": True})
    assert seen == [{"tool": "echo", "args": {"a": 1}}] == [node.payload]


def test_async_branch_is_a_context_manager_and_still_awaitable() -> None:
    async def main() -> tuple[bool, ...]:
        async with AsyncRuntime().run("a") as run:
            start = run.cursor_id
            async with run.branch() as branch:
                anchor = run.store.get(branch.cursor_id)
                await branch.note({"k": 1})
            with run.branch() as sync_branch:
                sync_anchor = run.store.get(sync_branch.cursor_id)
            awaited = await run.branch()
            return (
                anchor.payload == {"branch": True} and anchor.parent == start,
                sync_anchor.parent == start and sync_anchor.id != anchor.id,
                awaited.cursor_id not in (anchor.id, sync_anchor.id),
                run.cursor_id == start,
            )

    assert all(asyncio.run(main()))


class _Confirm:
    def decide(self, context: PolicyContext) -> Decision:
        return Decision.ALLOW if context.confirmed else Decision.CONFIRM


def test_a_resume_token_is_single_use_and_the_cursor_stays_put() -> None:
    rt = Runtime(registry=Registry([_spec()]), policies=[_Confirm()])
    with rt.run("c") as run:
        asked_from = run.note({"before": 1}).id
        with pytest.raises(ConfirmationRequired) as info:
            run.tool_call("send", {"token": "t"})
        assert run.cursor_id == asked_from  # where 0.8 leaves it
        node = run.confirm(info.value.resume_token)
        assert node.parent == asked_from and run.cursor_id == node.id
        with pytest.raises(KeyError, match="already used"):
            run.confirm(info.value.resume_token)


def test_aconfirm_twice_raises() -> None:
    async def main() -> None:
        rt = AsyncRuntime(registry=Registry([_spec()]), policies=[_Confirm()])
        async with rt.run("c") as run:
            with pytest.raises(ConfirmationRequired) as info:
                await run.atool_call("send", {"token": "t"})
            await run.aconfirm(info.value.resume_token)
            with pytest.raises(KeyError, match="already used"):
                await run.aconfirm(info.value.resume_token)

    asyncio.run(main())


class _Negative:
    def estimate_input_tokens(self, payload: Any) -> int:
        return -5


def test_token_meter_refuses_a_negative_estimate() -> None:
    with (
        Runtime(meters=[TokenMeter(_Negative())]).run("n") as run,
        pytest.raises(ValueError, match="int >= 0"),
    ):
        run.model_call({"model": "m"}, fn=lambda p: {"text": "x"})


@pytest.mark.parametrize("limit", [0, -1])
def test_window_meter_validates_its_limit(limit: int) -> None:
    with pytest.raises(ValueError, match="limit must be positive"):
        WindowMeter("requests", limit, 60)
    WindowMeter("requests", 60, 60)  # the README's example


def test_energy_meter_is_importable_from_its_0_8_place_with_interval_s() -> None:
    from pollard.meters import EnergyMeter as Exported
    from pollard.meters.energy import EnergyMeter

    class FakeNvml:
        def nvmlInit(self) -> None:
            pass

        def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
            return object()

        def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:
            return 1000

    assert EnergyMeter is Exported
    meter = EnergyMeter(index=0, interval_s=0.1, nvml=FakeNvml())
    assert meter.interval_s == 0.1
    with pytest.raises(ValueError, match="interval_s"):
        EnergyMeter(interval_s=0, nvml=FakeNvml())


def test_internal_code_triggers_no_deprecation_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        store = MemoryStore()
        with Runtime(store).run("w") as run:
            run.note({"a": 1})
            run.branch().prune()
        gc(store)
        seal(store, run.root_id)
