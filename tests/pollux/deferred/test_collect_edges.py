"""Collection edge cases the emulator cannot produce, through a fake Batch/Files client:
a batch whose input failed validation, missing, unknown and duplicate request ids, and a
cancel that races the end of the job."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollux import Config, InternalError, Session
from pollux._engine.deferred import HANDLE_FORMAT
from pollux.interaction.deferred import DeferredHandle
from pollux.providers.openai import OpenAIProvider


class _Lines:
    def __init__(self, lines: list[str]) -> None:
        self._lines = lines

    async def iter_lines(self) -> AsyncIterator[str]:
        for line in self._lines:
            yield line


class _Streaming:
    def __init__(self, files: dict[str, list[str]]) -> None:
        self._files = files

    @asynccontextmanager
    async def content(self, file_id: str) -> AsyncIterator[_Lines]:
        yield _Lines(self._files[file_id])


class _Files:
    def __init__(self, files: dict[str, list[str]]) -> None:
        self.with_streaming_response = _Streaming(files)
        self.deleted: list[str] = []

    async def delete(self, file_id: str) -> None:
        self.deleted.append(file_id)


class _StatusError(Exception):
    """Looks like the SDK's APIStatusError to pollux's error mapping (matched by class name)."""


_StatusError.__name__ = "APIStatusError"


class _Batches:
    def __init__(self, batch: dict[str, Any], *, refuse_cancel: bool = False) -> None:
        self.batch = batch
        self.refuse_cancel = refuse_cancel

    async def retrieve(self, job_id: str) -> dict[str, Any]:
        return self.batch

    async def cancel(self, job_id: str) -> dict[str, Any]:
        if self.refuse_cancel:
            error = _StatusError("Cannot cancel a batch with status 'completed'.")
            error.status_code = 400  # type: ignore[attr-defined]
            error.body = {"error": {"message": "Cannot cancel"}}  # type: ignore[attr-defined]
            raise error
        return self.batch


class FakeClient:
    def __init__(
        self, batch: dict[str, Any], files: dict[str, list[str]] | None = None, **kw: Any
    ) -> None:
        self.batches = _Batches(batch, **kw)
        self.files = _Files(files or {})

    async def close(self) -> None:
        pass


CONFIG = Config(provider="openai", model="gpt-5-nano", api_key="sk-test")


def _handle(count: int) -> DeferredHandle:
    return DeferredHandle(
        job_id="batch_1",
        provider="openai",
        model="gpt-5-nano",
        request_count=count,
        submitted_at=100.0,
        provider_state={
            "format": HANDLE_FORMAT,
            "backend": "openai",
            "owned_file_ids": ["file-src", "file-in"],
            "input_file_id": "file-in",
        },
    )


def _batch(status: str, completed: int, failed: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": "batch_1",
        "status": status,
        "request_counts": {"total": completed + failed, "completed": completed, "failed": failed},
        "expires_at": 86500,
        f"{status}_at": 200,
        **extra,
    }


def _ok_line(request_id: str, text: str) -> str:
    body = {
        "id": f"resp_{request_id}",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
    }
    return json.dumps(
        {"custom_id": request_id, "response": {"status_code": 200, "body": body}, "error": None}
    )


@pytest.fixture
def use_client(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make Sessions build the openai provider around a fake client."""

    def install(client: FakeClient) -> None:
        monkeypatch.setattr(
            "pollux._session.build_provider",
            lambda config, transport=None: OpenAIProvider(config, client=client),
        )

    return install


async def _collect(client: FakeClient, handle: DeferredHandle) -> Any:
    async with Session(CONFIG) as session:
        return await session.collect_deferred(handle)


async def test_validation_failure_fails_every_request_with_its_reason(use_client: Any) -> None:
    batch = _batch(
        "failed",
        0,
        0,
        errors={"data": [{"code": "invalid_json_line", "message": "bad JSON", "line": 2}]},
    )
    client = FakeClient(batch)
    use_client(client)
    result = await _collect(client, _handle(2))
    assert result.status == "error"
    for output in result.outputs:
        assert output.failed
        assert "bad JSON (line 2)" in output.diagnostics.raw["deferred"]["error"]["message"]
    assert sorted(client.files.deleted) == ["file-in", "file-src"]


async def test_missing_requests_become_failed_outputs(use_client: Any) -> None:
    client = FakeClient(
        _batch("completed", 1, 0, output_file_id="file-out"),
        {"file-out": [_ok_line("pollux-000001", "second"), ""]},
    )
    use_client(client)
    result = await _collect(client, _handle(2))
    assert result.answers == ["", "second"]
    missing = result.outputs[0]
    assert missing.failed
    assert missing.diagnostics.raw["deferred"]["request_id"] == "pollux-000000"
    assert missing.diagnostics.error is not None
    assert missing.diagnostics.error["error_category"] == "missing_result"


@pytest.mark.parametrize(
    ("lines", "needle"),
    [
        ([_ok_line("pollux-000000", "a"), _ok_line("pollux-000007", "b")], "unknown request id"),
        ([_ok_line("pollux-000000", "a"), _ok_line("pollux-000000", "b")], "twice"),
    ],
)
async def test_foreign_or_duplicate_ids_are_internal_errors(
    lines: list[str], needle: str, use_client: Any
) -> None:
    client = FakeClient(_batch("completed", 2, 0, output_file_id="file-out"), {"file-out": lines})
    use_client(client)
    with pytest.raises(InternalError, match=needle) as caught:
        await _collect(client, _handle(2))
    assert caught.value.hint


async def test_a_damaged_result_line_is_a_retryable_api_error(use_client: Any) -> None:
    client = FakeClient(
        _batch("completed", 1, 0, output_file_id="file-out"), {"file-out": ["{not json"]}
    )
    use_client(client)
    async with Session(CONFIG) as session:
        with pytest.raises(Exception, match="not JSON") as caught:
            await session.collect_deferred(_handle(1))
    assert getattr(caught.value, "phase", None) == "batch_collect"


async def test_cancel_racing_the_end_of_the_job_is_a_no_op(use_client: Any) -> None:
    client = FakeClient(_batch("completed", 1, 0), refuse_cancel=True)
    use_client(client)
    async with Session(CONFIG) as session:
        await session.cancel_deferred(_handle(1))
    assert sorted(client.files.deleted) == ["file-in", "file-src"]


async def test_cancel_refused_for_an_active_job_raises(use_client: Any) -> None:
    client = FakeClient(_batch("in_progress", 0, 0), refuse_cancel=True)
    use_client(client)
    async with Session(CONFIG) as session:
        with pytest.raises(Exception, match="Cannot cancel") as caught:
            await session.cancel_deferred(_handle(1))
    assert getattr(caught.value, "phase", None) == "batch_cancel"
    assert client.files.deleted == []


@settings(max_examples=25, deadline=None)
@given(order=st.permutations(range(6)), failing=st.sets(st.integers(0, 5), max_size=3))
def test_results_come_back_in_prompt_order_whatever_the_file_order(
    order: list[int], failing: set[int]
) -> None:
    # OpenAI does not promise the result files' line order; collection must not depend on it.
    outputs = [_ok_line(f"pollux-{i:06d}", f"answer {i}") for i in order if i not in failing]
    errors = [
        json.dumps(
            {
                "custom_id": f"pollux-{i:06d}",
                "response": {"status_code": 500, "body": {"error": {"message": "boom"}}},
            }
        )
        for i in order
        if i in failing
    ]
    batch = _batch(
        "completed",
        6 - len(failing),
        len(failing),
        output_file_id="file-out",
        error_file_id="file-err",
    )
    client = FakeClient(batch, {"file-out": outputs, "file-err": errors})

    async def scenario() -> Any:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(
                "pollux._session.build_provider",
                lambda config, transport=None: OpenAIProvider(config, client=client),
            )
            return await _collect(client, _handle(6))

    result = asyncio.run(scenario())
    assert result.answers == ["" if i in failing else f"answer {i}" for i in range(6)]
    assert [o.failed for o in result.outputs] == [i in failing for i in range(6)]
    assert result.status == ("ok" if not failing else "partial")
