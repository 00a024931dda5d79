from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pydantic
import pytest

from pollux import Source, SourceError
from pollux import source as source_module


def test_from_text() -> None:
    src = Source.from_text("x" * 80)
    assert (src.source_type, src.mime_type, src.size_bytes) == ("text", "text/plain", 80)
    assert src.identifier == "x" * 50
    assert Source.from_text("hello", identifier="greeting").identifier == "greeting"
    assert src.content_loader() == b"x" * 80
    with pytest.raises(SourceError):
        Source.from_text(b"bytes")  # type: ignore[arg-type]


def test_from_text_counts_utf8_bytes() -> None:
    assert Source.from_text("é").size_bytes == 2


def test_from_json_dict_and_pydantic() -> None:
    class Item(pydantic.BaseModel):
        name: str
        n: int

    src = Source.from_json({"a": [1, 2]})
    assert (src.source_type, src.mime_type, src.identifier) == (
        "json",
        "application/json",
        "json-data",
    )
    assert json.loads(src.content_loader()) == {"a": [1, 2]}
    model_src = Source.from_json(Item(name="x", n=1), identifier="item")
    assert json.loads(model_src.content_loader()) == {"name": "x", "n": 1}
    assert model_src.identifier == "item"


@pytest.mark.parametrize("bad", [object(), {"a": {1, 2}}, float("nan")])
def test_from_json_rejects_unserializable(bad: object) -> None:
    with pytest.raises(SourceError, match="not JSON serializable") as info:
        Source.from_json(bad)
    assert info.value.hint


def test_from_bytes() -> None:
    data = b"\x89PNG..."
    src = Source.from_bytes(data, mime_type="image/png", identifier="logo.png")
    assert (src.source_type, src.mime_type, src.size_bytes) == ("bytes", "image/png", len(data))
    assert src._read_bytes() == data
    default = Source.from_bytes(bytearray(b"abc"), mime_type="application/octet-stream")
    assert default.identifier == "bytes-" + hashlib.sha256(b"abc").hexdigest()[:12]
    assert Source.from_bytes(memoryview(b"abc"), mime_type="text/plain")._read_bytes() == b"abc"


@pytest.mark.parametrize(
    ("data", "mime", "ident"),
    [("text", "text/plain", None), (b"x", "", None), (b"x", "png", None), (b"x", "image/png", "")],
)
def test_from_bytes_validation(data: object, mime: str, ident: str | None) -> None:
    with pytest.raises(SourceError):
        Source.from_bytes(data, mime_type=mime, identifier=ident)  # type: ignore[arg-type]


def test_from_file(tmp_path: Path) -> None:
    path = tmp_path / "paper.pdf"
    path.write_bytes(b"%PDF-1.4 hello")
    src = Source.from_file(path)
    assert (src.source_type, src.mime_type, src.size_bytes) == ("file", "application/pdf", 14)
    assert src.identifier == str(path)
    assert src.content_loader() == b"%PDF-1.4 hello"
    assert Source.from_file(str(path), mime_type="application/x-custom").mime_type == (
        "application/x-custom"
    )


@pytest.mark.parametrize(
    ("name", "mime"),
    [
        ("a.md", "text/markdown"),
        ("a.csv", "text/csv"),
        ("a.png", "image/png"),
        ("a.mp4", "video/mp4"),
        ("a.unknownext", "application/octet-stream"),
    ],
)
def test_from_file_guesses_mime(tmp_path: Path, name: str, mime: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"x")
    assert Source.from_file(path).mime_type == mime


def test_from_file_missing_or_directory(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="File not found") as info:
        Source.from_file(tmp_path / "nope.pdf")
    assert info.value.hint
    with pytest.raises(SourceError, match="Not a regular file"):
        Source.from_file(tmp_path)
    with pytest.raises(SourceError):
        Source.from_file(42)  # type: ignore[arg-type]


def test_file_hash_is_streamed_and_memoized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.bin"
    payload = os.urandom(3 * 1024 * 1024 + 17)
    path.write_bytes(payload)
    src = Source.from_file(path)

    reads: list[int] = []
    real_iter = source_module._iter_file

    def counting_iter(p: Path, chunk_size: int):  # type: ignore[no-untyped-def]
        for chunk in real_iter(p, chunk_size):
            reads.append(len(chunk))
            yield chunk

    monkeypatch.setattr(source_module, "_iter_file", counting_iter)
    # A whole-file read would be a regression: the loader must not be used for hashing.
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read whole file"))
    source_module._HASH_MEMO.clear()

    expected = hashlib.sha256(payload).hexdigest()
    assert src._content_hash() == expected
    assert max(reads) <= source_module._CHUNK_SIZE
    assert len(reads) == 4
    reads.clear()
    assert src.cache_identity_hash() == expected
    assert Source.from_file(path)._content_hash() == expected
    assert reads == []  # memoized per (path, size, mtime)

    path.write_bytes(b"changed")
    os.utime(path, ns=(1, 1))
    assert src._content_hash() == hashlib.sha256(b"changed").hexdigest()
    assert reads == [7]


def test_iter_bytes(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(b"abcdefghij")
    assert list(Source.from_file(path)._iter_bytes(4)) == [b"abcd", b"efgh", b"ij"]
    assert list(Source.from_text("abcde")._iter_bytes(2)) == [b"ab", b"cd", b"e"]


def test_deleted_file_raises_source_error(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(b"abc")
    src = Source.from_file(path)
    path.unlink()
    with pytest.raises(SourceError, match="Cannot read"):
        src._content_hash()
    with pytest.raises(SourceError, match="Cannot read"):
        list(src._iter_bytes())


def test_remote_sources() -> None:
    yt = Source.from_youtube("https://www.youtube.com/watch?v=abc")
    assert (yt.source_type, yt.mime_type, yt.size_bytes) == ("youtube", "video/mp4", 0)
    assert yt._remote_uri == "https://www.youtube.com/watch?v=abc"
    uri = Source.from_uri("gs://bucket/doc.pdf", mime_type="application/pdf")
    assert (uri.source_type, uri.mime_type, uri.identifier) == (
        "uri",
        "application/pdf",
        "gs://bucket/doc.pdf",
    )
    assert Source.from_uri("https://x.org/a").mime_type == "application/octet-stream"
    assert Source.from_text("x")._remote_uri is None


@pytest.mark.parametrize("bad", ["", "watch?v=abc", 3])
def test_from_youtube_validation(bad: object) -> None:
    with pytest.raises(SourceError):
        Source.from_youtube(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("uri", "mime"), [("", "text/plain"), ("no-scheme", "text/plain"), ("https://x", "")]
)
def test_from_uri_validation(uri: str, mime: str) -> None:
    with pytest.raises(SourceError):
        Source.from_uri(uri, mime_type=mime)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("2301.07041", "2301.07041"),
        ("2301.07041v2", "2301.07041v2"),
        ("  1706.03762  ", "1706.03762"),
        ("2301.07041.pdf", "2301.07041"),
        ("hep-th/9901001", "hep-th/9901001"),
        ("math.GT/0309136v1", "math.GT/0309136v1"),
        ("https://arxiv.org/abs/2301.07041", "2301.07041"),
        ("http://arxiv.org/pdf/2301.07041v3.pdf", "2301.07041v3"),
        ("https://www.arxiv.org/abs/hep-th/9901001", "hep-th/9901001"),
        ("https://export.arxiv.org/pdf/2301.07041/", "2301.07041"),
        ("arxiv.org/abs/2301.07041", "2301.07041"),
    ],
)
def test_from_arxiv_normalizes(ref: str, expected: str) -> None:
    src = Source.from_arxiv(ref)
    assert src.identifier == f"https://arxiv.org/pdf/{expected}.pdf"
    assert (src.source_type, src.mime_type) == ("arxiv", "application/pdf")


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "   ",
        "not-an-id",
        "230.07041",
        "2301.07041v",
        "https://example.com/abs/2301.07041",
        "https://arxiv.org/list/cs.AI",
        "ftp://arxiv.org/abs/2301.07041",
        "https://evilarxiv.org/abs/2301.07041",
        None,
    ],
)
def test_from_arxiv_rejects(ref: object) -> None:
    with pytest.raises(SourceError) as info:
        Source.from_arxiv(ref)  # type: ignore[arg-type]
    assert info.value.hint


def test_gemini_video_settings(tmp_path: Path) -> None:
    yt = Source.from_youtube("https://youtu.be/abc")
    tuned = yt.with_gemini_video_settings(start_offset="10s", fps=2)
    assert yt.provider_hints == ()
    assert tuned.gemini_video_settings_for("gemini") == {"start_offset": "10s", "fps": 2.0}
    assert tuned.gemini_video_settings_for("openai") is None
    assert tuned.provider_hints_for(None) is None
    # Setting again replaces rather than stacks.
    again = tuned.with_gemini_video_settings(end_offset="20s")
    assert again.gemini_video_settings_for("gemini") == {"end_offset": "20s"}
    video = tmp_path / "clip.mp4"
    video.write_bytes(b"v")
    assert Source.from_file(video).with_gemini_video_settings(fps=24).gemini_video_settings_for(
        "gemini"
    ) == {"fps": 24.0}


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"fps": 0},
        {"fps": 24.5},
        {"fps": -1},
        {"fps": True},
        {"fps": "2"},
        {"start_offset": " "},
        {"end_offset": 5},
    ],
)
def test_gemini_video_settings_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(SourceError):
        Source.from_youtube("https://youtu.be/abc").with_gemini_video_settings(**kwargs)  # type: ignore[arg-type]


def test_gemini_video_settings_need_a_video() -> None:
    with pytest.raises(SourceError, match="video source"):
        Source.from_text("x").with_gemini_video_settings(fps=1)


def test_gemini_url_context() -> None:
    src = Source.from_uri(
        "https://example.com/page", mime_type="text/html"
    ).with_gemini_url_context()
    assert src.provider_hints_for("gemini") == {"url_context": {}}
    assert src.provider_hints_for("anthropic") is None
    with pytest.raises(SourceError, match="from_uri"):
        Source.from_text("x").with_gemini_url_context()
    with pytest.raises(SourceError, match="HTTP"):
        Source.from_uri("gs://b/x").with_gemini_url_context()


def test_cache_identity_hash() -> None:
    src = Source.from_text("hello")
    plain = hashlib.sha256(b"hello").hexdigest()
    assert src.cache_identity_hash() == plain
    assert src.cache_identity_hash(provider="gemini") == plain
    yt = Source.from_youtube("https://youtu.be/abc")
    tuned = yt.with_gemini_video_settings(fps=1)
    assert tuned.cache_identity_hash(provider="openai") == yt.cache_identity_hash()
    assert tuned.cache_identity_hash(provider="gemini") != yt.cache_identity_hash(provider="gemini")


def test_equality_by_content(tmp_path: Path) -> None:
    assert Source.from_text("a") == Source.from_text("a")
    assert Source.from_text("a") != Source.from_text("b")
    assert hash(Source.from_text("a")) == hash(Source.from_text("a"))
    path = tmp_path / "f.txt"
    path.write_text("x")
    assert Source.from_file(path) == Source.from_file(path)


def test_source_is_frozen() -> None:
    src = Source.from_text("a")
    with pytest.raises(AttributeError):
        src.identifier = "b"  # type: ignore[misc]


def test_sources_pickle_and_copy(tmp_path: Path) -> None:
    import copy
    import pickle

    path = tmp_path / "clip.mp4"
    path.write_bytes(b"video")
    sources = [
        Source.from_text("hello"),
        Source.from_bytes(b"\x00\x01", mime_type="image/png"),
        Source.from_file(path).with_gemini_video_settings(fps=2),
        Source.from_arxiv("2301.07041"),
    ]
    for src in sources:
        for clone in (pickle.loads(pickle.dumps(src)), copy.deepcopy(src), copy.copy(src)):
            assert clone == src
            assert clone.content_loader() == src.content_loader()
            assert clone.cache_identity_hash(provider="gemini") == src.cache_identity_hash(
                provider="gemini"
            )


def test_from_json_rejects_a_model_class() -> None:
    class Item(pydantic.BaseModel):
        n: int

    with pytest.raises(SourceError):
        Source.from_json(Item)
