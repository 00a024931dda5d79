"""Sources -> Responses input parts: inlining, Files API uploads (deleted afterwards), URLs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pollux.errors import APIError, ConfigurationError, SourceError
from pollux.providers.openai.uploads import (
    UPLOAD_TTL_S,
    delete_files,
    is_text_like,
    plan_source,
    prepare_parts,
)
from pollux.source import Source


class _Created:
    def __init__(self, file_id: str) -> None:
        self.id = file_id


class FakeFiles:
    """Records uploads; reads the streamed file object the way the HTTP layer would."""

    def __init__(self, *, fail_on: str | None = None, fail_delete: bool = False) -> None:
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.fail_on = fail_on
        self.fail_delete = fail_delete

    async def create(self, *, file: tuple[str, Any, str], purpose: str, **kwargs: Any) -> Any:
        name, handle, mime = file
        if self.fail_on == name:
            raise RuntimeError("upload exploded")
        streamed = not isinstance(handle, bytes)
        content = handle.read() if streamed else handle
        self.created.append(
            {
                "name": name,
                "mime": mime,
                "purpose": purpose,
                "streamed": streamed,
                "content": content,
                **kwargs,
            }
        )
        return _Created(f"file-{len(self.created)}")

    async def delete(self, file_id: str) -> None:
        if self.fail_delete:
            raise RuntimeError("delete failed")
        self.deleted.append(file_id)


class FakeClient:
    def __init__(self, **kwargs: Any) -> None:
        self.files = FakeFiles(**kwargs)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "pdf": tmp_path / "paper.pdf",
        "png": tmp_path / "chart.png",
        "md": tmp_path / "notes.md",
        "csv": tmp_path / "table.csv",
    }
    paths["pdf"].write_bytes(b"%PDF-1.4 fake")
    paths["png"].write_bytes(b"\x89PNG fake")
    paths["md"].write_text("# Notes\nhello", encoding="utf-8")
    paths["csv"].write_text("a,b\n1,2\n", encoding="utf-8")
    return paths


async def test_routes_and_parts_for_every_kind(files: dict[str, Path]) -> None:
    client = FakeClient()
    sources = [
        Source.from_text("plain context"),
        Source.from_json({"k": 1}),
        Source.from_file(files["md"]),
        Source.from_file(files["csv"]),
        Source.from_file(files["pdf"]),
        Source.from_file(files["png"]),
        Source.from_bytes(b"\x89PNG2", mime_type="image/png", identifier="mem.png"),
        Source.from_uri("https://example.com/a.png", mime_type="image/png"),
        Source.from_arxiv("2301.07041"),
    ]
    prepared = await prepare_parts(client, sources)
    assert prepared.parts == (
        {"type": "input_text", "text": "plain context"},
        {"type": "input_text", "text": '{"k": 1}'},
        {"type": "input_text", "text": "# Notes\nhello"},
        {"type": "input_text", "text": "a,b\n1,2\n"},
        {"type": "input_file", "file_id": "file-1"},
        {"type": "input_image", "file_id": "file-2", "detail": "auto"},
        {"type": "input_image", "file_id": "file-3", "detail": "auto"},
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
        {"type": "input_file", "file_url": "https://arxiv.org/pdf/2301.07041.pdf"},
    )
    assert prepared.owned == ("file-1", "file-2", "file-3")
    uploads = client.files.created
    assert [u["name"] for u in uploads] == ["paper.pdf", "chart.png", "mem.png"]
    assert all(u["purpose"] == "user_data" for u in uploads)
    assert all(
        u["expires_after"] == {"anchor": "created_at", "seconds": UPLOAD_TTL_S} for u in uploads
    )
    # Files on disk are streamed (an open file object), never read whole by pollux.
    assert [u["streamed"] for u in uploads] == [True, True, False]
    assert uploads[0]["content"] == b"%PDF-1.4 fake"
    assert uploads[0]["mime"] == "application/pdf"


async def test_same_file_twice_is_uploaded_once(files: dict[str, Path]) -> None:
    client = FakeClient()
    source = Source.from_file(files["pdf"])
    prepared = await prepare_parts(client, [source, Source.from_file(files["pdf"])])
    assert len(client.files.created) == 1
    assert prepared.parts[0] == prepared.parts[1]
    assert prepared.owned == ("file-1",)


async def test_failed_upload_deletes_the_others_and_raises(files: dict[str, Path]) -> None:
    client = FakeClient(fail_on="chart.png")
    with pytest.raises(APIError) as info:
        await prepare_parts(
            client, [Source.from_file(files["pdf"]), Source.from_file(files["png"])]
        )
    assert info.value.phase == "upload"
    assert client.files.deleted == ["file-1"]


async def test_delete_is_best_effort() -> None:
    client = FakeClient()
    assert await delete_files(client, ["a", "b"]) == []
    assert client.files.deleted == ["a", "b"]
    failing = FakeClient(fail_delete=True)
    assert await delete_files(failing, ["a"]) == ["a"]


@pytest.mark.parametrize(
    ("source_factory", "needle"),
    [
        (lambda p: Source.from_youtube("https://www.youtube.com/watch?v=abc"), "YouTube"),
        (lambda p: Source.from_uri("ftp://host/x.pdf", mime_type="application/pdf"), "http"),
        (lambda p: Source.from_uri("https://host/blob"), "application/octet-stream"),
        (lambda p: Source.from_bytes(b"RIFF", mime_type="audio/wav"), "audio/wav"),
        (lambda p: Source.from_bytes(b"x", mime_type="image/tiff"), "image/tiff"),
    ],
)
def test_unsupported_sources_fail_before_io(source_factory: Any, needle: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        plan_source(source_factory(None))
    assert needle in str(info.value)
    assert info.value.hint


async def test_non_utf8_text_file_is_a_source_error(tmp_path: Path) -> None:
    path = tmp_path / "latin.txt"
    path.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(SourceError):
        await prepare_parts(FakeClient(), [Source.from_file(path)])


def test_text_like_mimes() -> None:
    for mime in ("text/markdown", "application/json", "application/ld+json", "text/csv"):
        assert is_text_like(mime)
    for mime in ("application/pdf", "image/png", "application/octet-stream"):
        assert not is_text_like(mime)


async def test_cancelled_prepare_deletes_finished_uploads(files: dict[str, Path]) -> None:
    import asyncio

    client = FakeClient()
    gate = asyncio.Event()
    first_done = asyncio.Event()
    real_create = client.files.create

    async def create(*, file: tuple[str, Any, str], purpose: str, **kwargs: Any) -> Any:
        if file[0] == "chart.png":
            await gate.wait()  # never released: this upload is in flight at cancellation
        created = await real_create(file=file, purpose=purpose, **kwargs)
        first_done.set()
        return created

    client.files.create = create  # type: ignore[method-assign]
    task = asyncio.ensure_future(
        prepare_parts(client, [Source.from_file(files["pdf"]), Source.from_file(files["png"])])
    )
    await first_done.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.files.deleted == ["file-1"]


async def test_bad_text_fails_before_any_upload(files: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\xfa")
    client = FakeClient()
    with pytest.raises(SourceError):
        await prepare_parts(client, [Source.from_file(files["pdf"]), Source.from_file(bad)])
    assert client.files.created == []
