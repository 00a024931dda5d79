"""pollard 0.8.0 API compatibility, part two: stores, meters, MCP, adapters and the CLI.

Each expectation was observed on the released ``pollard==0.8.0`` run as a black box.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from pollard import MemoryStore, Node, Runtime, SQLiteStore, recompute_charges, redact
from pollard.adapters.anthropic import make_messages_fn
from pollard.adapters.bedrock import make_converse_fn
from pollard.adapters.openai import make_chat_completions_fn, make_responses_fn
from pollard.cli import main
from pollard.mcp import registry_from_mcp
from pollard.meters import StepMeter, TokenmasterMeter

# -- store.children / store.roots ------------------------------------------------------------


@pytest.mark.parametrize("make", [MemoryStore, "sqlite"])
def test_children_and_roots_are_ids_that_also_read_as_nodes(make: Any, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db") if make == "sqlite" else make()
    with store, Runtime(store).run("r") as run:
        note = run.note({"a": 1})
        (root,) = store.roots()
        (child,) = store.children(run.root_id)
        # 0.8 code: ids.
        assert store.roots() == [run.root_id] and store.children(run.root_id) == [note.id]
        assert store.get(child).id == note.id and isinstance(child, str)
        assert json.loads(json.dumps(store.children(run.root_id))) == [note.id]
        assert sorted(store.children(run.root_id)) == [note.id]
        # and the node-reading form.
        assert child.payload == {"a": 1} and child.kind.value == "note" and child == note
        assert root.payload == {"run": "r"} and isinstance(root.node, Node)


# -- meters ---------------------------------------------------------------------------------


def test_tokenmaster_meter_needs_no_model_and_charges_every_token_field() -> None:
    pytest.importorskip("tokenmaster")
    rt = Runtime(meters=[StepMeter(), TokenmasterMeter(expected_remaining_turns=5)])
    with rt.run("tm") as run:
        # The README's example usage, with cache and reasoning fields (charged, says 0.8's README).
        raw = {"input_tokens": 1000, "output_tokens": 300, "cache_read_input_tokens": 50}
        node = run.model_call(
            {"model": "anthropic:claude-sonnet-4-6"},
            fn=lambda _p: {"usage": {**raw, "reasoning_tokens": 20}},
        )
        assert node.meta["charges"]["tokens"] == 1000 + 300 + 50 + 20
        assert node.meta["tokenmaster"]["state"]["zone"]
        chat = {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 2},
        }
        node = run.model_call({"model": "gpt-5.5"}, fn=lambda _p: {"usage": chat})
        assert node.meta["charges"]["tokens"] == 15  # each token once
        turn = node.meta["tokenmaster"]["turn"]
        assert (turn["input_tokens"], turn["cache_read_tokens"], turn["reasoning_tokens"]) == (
            6,
            4,
            2,
        )


def test_recompute_charges_and_report_agree_on_number_types() -> None:
    with Runtime().run("n") as run:
        run.model_call(
            {"model": "m"},
            fn=lambda _p: {"text": "x", "usage": {"input_tokens": 3, "output_tokens": 2}},
        )
        recomputed = recompute_charges(run.store, run.root_id)
        total = run.report()["total"]
    # report() also lists the meters still at zero; recompute_charges only what was charged.
    assert recomputed == {k: v for k, v in total.items() if v or k in recomputed}
    assert {type(v) for v in recomputed.values()} <= {type(v) for v in total.values()}
    assert recompute_charges(run.store, run.root_id, exact=True)["tokens"] == "5"


# -- MCP ------------------------------------------------------------------------------------


class _Item:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class _Result(_Item):
    def model_dump(self) -> dict[str, Any]:
        return dict(self.__dict__)


class _SyncSession:
    """A synchronous session (pollard 0.8 accepted these)."""

    def list_tools(self) -> Any:
        schema = {"type": "object", "properties": {"city": {"type": "string"}}}
        hints = _Item(readOnlyHint=True)
        tool = _Item(name="weather", description="Weather.", inputSchema=schema, annotations=hints)
        return _Item(tools=[tool], nextCursor=None)

    def call_tool(self, name: str, args: dict[str, Any]) -> Any:
        return _Result(content=[{"type": "text", "text": "sunny"}], isError=False, meta=None)


def test_registry_from_mcp_accepts_sync_sessions_and_records_model_dump() -> None:
    async def main_() -> dict[str, Any]:
        registry = await registry_from_mcp(_SyncSession())
        assert registry.get("weather").side_effects is True  # 0.8 does not trust the hint
        handler = registry.get("weather").handler
        assert handler is not None
        result: dict[str, Any] = await handler({"city": "Oslo"})
        return result

    assert asyncio.run(main_()) == {
        "content": [{"type": "text", "text": "sunny"}],
        "isError": False,
        "meta": None,
    }


# -- adapters -------------------------------------------------------------------------------


class _ToDict:
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def to_dict(self) -> dict[str, Any]:
        return self._data


class _Endpoint:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def create(self, **_kw: Any) -> _ToDict:
        return _ToDict(self.data)


class _Client:
    def __init__(self, data: dict[str, Any]) -> None:
        self.responses = self.messages = _Endpoint(data)
        self.chat = _Item(completions=_Endpoint(data))


RESPONSES = {
    "output": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "r"}]}
    ],
    "usage": {"input_tokens": 3, "output_tokens": 2},
}
CHAT = {
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "c"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
}
MESSAGES = {
    "role": "assistant",
    "content": [{"type": "text", "text": "m"}],
    "usage": {"input_tokens": 3, "output_tokens": 2},
}


@pytest.mark.parametrize(
    ("make", "data", "payload", "text"),
    [
        (make_responses_fn, RESPONSES, {"model": "m", "input": "x"}, "r"),
        (make_chat_completions_fn, CHAT, {"model": "m", "messages": []}, "c"),
        (make_messages_fn, MESSAGES, {"model": "m", "messages": [], "max_tokens": 5}, "m"),
    ],
)
def test_adapters_read_objects_that_expose_only_to_dict(
    make: Any, data: dict[str, Any], payload: dict[str, Any], text: str
) -> None:
    with Runtime().run("a") as run:
        node = run.model_call(payload, fn=make(_Client(data)))
    assert node.result["text"] == text
    assert (node.result["usage"]["input_tokens"], node.result["usage"]["output_tokens"]) == (3, 2)


def test_bedrock_stream_errors_are_runtime_errors_with_the_provider_message() -> None:
    class Bedrock:
        def converse_stream(self, **_kw: Any) -> dict[str, Any]:
            events = [
                {"messageStart": {"role": "assistant"}},
                {"throttlingException": {"message": "Rate exceeded, slow down"}},
            ]
            return {"stream": iter(events)}

    with Runtime().run("b") as run, pytest.raises(RuntimeError) as info:
        run.model_call({"messages": []}, fn=make_converse_fn(Bedrock(), stream=True, modelId="m"))
    assert str(info.value) == "Bedrock stream throttlingException: Rate exceeded, slow down"


# -- the CLI ---------------------------------------------------------------------------------


@pytest.fixture
def two_stores(tmp_path: Path) -> tuple[Path, Path, str]:
    paths = []
    for label in ("ra", "rb"):
        path = tmp_path / f"{label}.db"
        with Runtime(path) as rt, rt.run(label) as run:
            run.model_call(
                {"model": "m", "secret": redact("hunter2", "pw")},
                fn=lambda _p: {"text": "hello", "usage": {"input_tokens": 3, "output_tokens": 2}},
            )
            run.branch().note({"x": 1})
            if label == "ra":
                root = run.root_id
        paths.append(path)
    return paths[0], paths[1], root


def _cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_import_of_a_tampered_bundle_exits_2(
    two_stores: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, root = two_stores
    bundle = tmp_path / "x.json"
    assert _cli(capsys, "export", a, root, bundle)[0] == 0
    bundle.write_text(bundle.read_text().replace("hello", "HELLO"))
    code, out, err = _cli(capsys, "import", bundle, tmp_path / "target.db")
    assert (code, out) == (2, "") and err.startswith("pollard: integrity:")
    assert not (tmp_path / "target.db").exists()


def test_merge_json_has_flat_sums(
    two_stores: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, _ = two_stores
    code, out, _ = _cli(capsys, "merge", tmp_path / "m.db", a, b, "--json")
    report = json.loads(out)
    assert code == 0 and report["copied"] == 8 and report["existing"] == 0
    assert report["result_conflicts"] == report["meta_conflicts"] == 0
    assert [s["copied"] for s in report["sources"]] == [4, 4]


def test_show_unicode_draws_a_tree_and_html_payloads_mark_redactions(
    two_stores: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, root = two_stores
    code, out, _ = _cli(capsys, "show", a, root, "--unicode")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("root ")
    assert lines[1].startswith("└── model_call") and lines[2].startswith("    └── note")
    page = tmp_path / "run.html"
    assert _cli(capsys, "show", a, root, "--html", page, "--payloads")[0] == 0
    html = page.read_text()
    assert "[REDACTED]" in html and "__pollard_redacted" in html and "hunter2" not in html
