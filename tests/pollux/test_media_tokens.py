"""`pollux.media_tokens`: an image's size and a clip's duration from its file, and their cost."""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

import pytest

from pollux import Source, media_tokens
from pollux.media_tokens import (
    image_size,
    image_tokens,
    media_seconds,
    pdf_pages,
    source_image_size,
    source_media_seconds,
    source_pdf_pages,
    source_tokens,
)

MEDIA = Path(__file__).resolve().parent / "media"

# Images made with Pillow 13 (one colour each, so the files stay small); clips with PyAV 18
# (FFmpeg's encoders: LAME, AAC, FLAC, x264, Opus, VP8) and the wave module.
FIXTURES = {
    "wide.png": (1023, 767),
    "baseline.jpg": (640, 480),
    "progressive.jpg": (333, 222),
    "small.gif": (17, 9),
    "lossy.webp": (301, 157),
    "lossless.webp": (302, 158),
    "extended.webp": (303, 159),
    "tiny.bmp": (31, 7),
}


@pytest.mark.parametrize(("name", "size"), sorted(FIXTURES.items()))
def test_the_size_is_read_from_each_formats_header(name: str, size: tuple[int, int]) -> None:
    data = (MEDIA / name).read_bytes()
    assert image_size(data) == size
    assert source_image_size(Source.from_file(MEDIA / name)) == size
    assert source_image_size(Source.from_bytes(data, mime_type="image/x-any")) == size


def test_a_jpeg_whose_size_sits_after_large_metadata_is_still_read(tmp_path: Path) -> None:
    # A 200 KB APP2 segment (an ICC profile's size) between the SOI marker and the frame.
    jpeg = (MEDIA / "baseline.jpg").read_bytes()
    app2 = b"\xff\xe2" + struct.pack(">H", 65_535) + bytes(65_533)
    padded = jpeg[:2] + app2 * 3 + jpeg[2:]
    path = tmp_path / "big-profile.jpg"
    path.write_bytes(padded)
    assert image_size(padded[: 1 << 16]) is None  # the first 64 KiB do not reach the frame
    assert source_image_size(Source.from_file(path)) == (640, 480)


def test_a_top_down_bmp_reads_its_height_as_positive() -> None:
    bmp = bytearray((MEDIA / "tiny.bmp").read_bytes())
    bmp[22:26] = struct.pack("<i", -7)
    assert image_size(bytes(bmp)) == (31, 7)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x89PNG\r\n\x1a\n",  # cut before IHDR
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x00\x00\x00\x00\x05",  # width 0
        b"\xff\xd8\xff\xe0\x00\x10JFIF",  # cut inside the segments
        b"\xff\xd8\xff\xda\x00\x08",  # scan data before any frame
        b"\xff\xd8\x00\x00",  # not a marker
        b"RIFF\x00\x00\x00\x00WEBPVP8 ",  # cut
        b"GIF89a\x01",
        b"%PDF-1.7",
        bytes(64),
    ],
)
def test_a_cut_or_unknown_header_has_no_size(data: bytes) -> None:
    assert image_size(data) is None


def test_sources_that_are_not_local_images_have_no_size(tmp_path: Path) -> None:
    assert (
        source_image_size(Source.from_uri("https://example.com/a.png", mime_type="image/png"))
        is None
    )
    assert source_image_size(Source.from_text("not an image")) is None
    png = tmp_path / "gone.png"
    png.write_bytes((MEDIA / "wide.png").read_bytes())
    source = Source.from_file(png)
    png.unlink()
    assert source_image_size(source) is None  # unreadable now: estimated as of unknown size


def test_openai_tiles_patches_and_gpt_4o_mini() -> None:
    # 1023 x 767: the short side fits 768 already, so 2 x 2 tiles of 512 px.
    assert image_tokens("openai", "gpt-4o", (1023, 767)) == 85 + 170 * 4
    # 4000 x 3000: fit in 2048 (2048 x 1536), short side to 768 (1024 x 768): 2 x 2 tiles.
    assert image_tokens("openai", "gpt-5", (4000, 3000)) == 85 + 170 * 4
    # 768 x 2048 is the most tiles any image makes: 2 x 4.
    assert image_tokens("azure_openai", "gpt-4.1", (768, 2048)) == image_tokens("openai", "gpt-4.1")
    assert image_tokens("openai", "gpt-4o-mini", (512, 512)) == 2833 + 5667
    assert image_tokens("openai", "gpt-4o-mini") == 2833 + 5667 * 8
    # Patch models: ceil(w/32) x ceil(h/32), at most 1,536, times the model's multiplier.
    assert image_tokens("openai", "gpt-5-nano", (1023, 767)) == math.ceil(32 * 24 * 2.46)
    assert image_tokens("openai", "gpt-5-mini", (1023, 767)) == math.ceil(32 * 24 * 1.62)
    assert image_tokens("openai", "gpt-4.1-nano", (4000, 3000)) == math.ceil(1536 * 2.46)
    assert image_tokens("openai", "o4-mini") == math.ceil(1536 * 1.72)
    assert image_tokens("openrouter", "openai/gpt-5-nano") == image_tokens("openai", "gpt-5-nano")


def test_anthropic_counts_area_and_patches_up_to_its_cap() -> None:
    assert image_tokens("anthropic", "claude-sonnet-4-5", (1024, 768)) == 1049  # 786,432 / 750
    assert image_tokens("anthropic", "claude-opus-4-7", (200, 200)) == 64  # 8 x 8 patches of 28
    assert image_tokens("anthropic", "claude-opus-4-7", (8000, 8000)) == 4784
    assert image_tokens("anthropic", None) == 4784
    assert image_tokens("openrouter", "anthropic/claude-haiku-4-5") == 4784


def test_gemini_tiles_before_3_and_a_fixed_figure_after() -> None:
    assert image_tokens("gemini", "gemini-2.5-flash", (384, 300)) == 258
    assert image_tokens("gemini", "gemini-2.5-flash", (1600, 900)) == 258 * 3 * 2
    assert image_tokens("vertex", "gemini-2.0-flash") == 258 * 16
    assert image_tokens("gemini", "gemini-3-flash-preview", (4000, 3000)) == 1120
    assert image_tokens("openrouter", "google/gemini-3.1-pro") == 1120


def test_an_unknown_model_takes_the_largest_rule() -> None:
    size = (4000, 3000)
    known = (
        image_tokens("openai", "gpt-4o", size),
        math.ceil(4000 * 3000 / 750),  # Anthropic's area rule before its cap
        image_tokens("gemini", "gemini-2.5-flash", size),
    )
    assert image_tokens("local", "llava", size) == max(known) == 16_000
    assert image_tokens("local", None) == 16_384
    assert image_tokens("openrouter", "mistralai/pixtral") == 16_384
    assert image_tokens("local", "llava", (0, 0)) >= 1  # a degenerate size still counts


CLIPS = {
    "cbr.mp3": 3.06,  # 32 kbps LAME with an Info frame count (the encoder's delay included)
    "vbr.mp3": 3.03,
    "clip.m4a": 2.5,  # AAC in MP4, its moov box after the media data
    "clip.mp4": 2.0,  # H.264
    "clip.flac": 1.5,
    "clip.wav": 2.0,
}


@pytest.mark.parametrize(("name", "seconds"), sorted(CLIPS.items()))
def test_the_duration_is_read_from_each_format(name: str, seconds: float) -> None:
    data = (MEDIA / name).read_bytes()
    assert media_seconds(data) == pytest.approx(seconds, abs=0.01)
    assert source_media_seconds(Source.from_file(MEDIA / name)) == pytest.approx(seconds, abs=0.01)


def test_formats_it_does_not_read_have_no_duration() -> None:
    for name in ("clip.ogg", "clip.webm", "wide.png"):
        assert media_seconds((MEDIA / name).read_bytes()) is None
    remote = Source.from_uri("https://example.com/a.mp3", mime_type="audio/mpeg")
    assert source_media_seconds(remote) is None


def test_an_mp3_without_a_frame_count_is_timed_by_its_size() -> None:
    data = bytearray((MEDIA / "cbr.mp3").read_bytes())
    at = data.index(b"Info")
    data[at : at + 4] = b"\0\0\0\0"  # as an encoder that writes no Info frame leaves it
    # (LAME gave its tag frame 56 kbps to hold the tag: the second frame says 32.)
    # The bytes after the tag at 32 kbps: the same three seconds, give or take a frame.
    assert media_seconds(bytes(data)) == pytest.approx(3.06, abs=0.1)


def test_an_mp4_with_64_bit_boxes_and_a_version_1_header() -> None:
    mvhd = b"mvhd" + bytes([1, 0, 0, 0]) + bytes(16) + (1000).to_bytes(4, "big")
    mvhd += (90_500).to_bytes(8, "big")
    mvhd = (8 + len(mvhd) - 4).to_bytes(4, "big") + mvhd
    moov = (1).to_bytes(4, "big") + b"moov" + (16 + len(mvhd)).to_bytes(8, "big") + mvhd
    ftyp = (16).to_bytes(4, "big") + b"ftypisom" + bytes(4)
    assert media_seconds(ftyp + moov) == pytest.approx(90.5)


@pytest.mark.parametrize(
    "data",
    [
        b"RIFF\0\0\0\0WAVE",  # no chunks
        b"RIFF\0\0\0\0WAVEdata\x10\0\0\0" + bytes(16),  # data before fmt: no byte rate
        b"\0\0\0\x10ftypisom\0\0\0\0" + b"\0\0\0\x08moov",  # moov without mvhd
        b"\0\0\0\x10ftypisom\0\0\0\0" + b"\0\0\0\x01moov\0\0\0\0",  # cut 64-bit size
        b"\0\0\0\x10ftypisom\0\0\0\0" + b"\0\0\0\x00free" * 3,  # a box to the end
        b"fLaC\0\0\0\x22" + bytes(34),  # no sample rate
        b"ID3\x04\0\0\x7f\x7f\x7f\x7f",  # a tag longer than the file
        b"\xff\xfb" + bytes(2),  # a frame header with bitrate index 0
        b"",
    ],
)
def test_a_cut_or_hostile_clip_has_no_duration(data: bytes) -> None:
    assert media_seconds(data) is None


def test_a_box_loop_cannot_spin() -> None:
    # A box of length 8 repeated: the reader walks at most a bounded number of boxes.
    data = b"\0\0\0\x10ftypisom\0\0\0\0" + b"\0\0\0\x08skip" * 100_000
    assert media_seconds(data) is None


def test_what_a_source_costs_by_its_pixels_or_seconds() -> None:
    mp3 = Source.from_file(MEDIA / "cbr.mp3")
    assert source_tokens(mp3, "gemini", "gemini-2.5-flash") == math.ceil(3.0563 * 32)
    assert source_tokens(mp3, "openai", "gpt-4o-audio-preview") == source_tokens(
        mp3, "gemini", None
    )
    video = Source.from_file(MEDIA / "clip.mp4")
    assert source_tokens(video, "gemini", "gemini-2.5-flash") == 2 * (258 + 32)
    sampled = video.with_gemini_video_settings(fps=4)
    assert source_tokens(sampled, "gemini", "gemini-2.5-pro") == 2 * (4 * 258 + 32)
    assert source_tokens(sampled, "vertex", "gemini-2.5-pro") == 2 * (258 + 32)  # Gemini's hint
    # Another provider's video, a clip whose duration is not read and a PDF: counted by bytes.
    assert source_tokens(video, "openai", "gpt-5") is None
    assert source_tokens(Source.from_file(MEDIA / "clip.ogg"), "gemini", None) is None
    pdf = Source.from_bytes(b"%PDF-1.7", mime_type="application/pdf")
    assert source_tokens(pdf, "gemini", None) is None  # no pages found
    svg = Source.from_bytes(b"<svg/>", mime_type="image/svg+xml")  # text to a model
    assert source_tokens(svg, "openai", "gpt-4o") is None
    photo = Source.from_file(MEDIA / "wide.png")
    assert source_tokens(photo, "openai", "gpt-4o") == image_tokens("openai", "gpt-4o", (1023, 767))


def _pdf(*objects: bytes) -> bytes:
    """A PDF of ``objects`` (numbered from 1), without a cross-reference table: enough to count."""
    body = b"".join(b"%d 0 obj\n%s\nendobj\n" % (n, o) for n, o in enumerate(objects, 1))
    return b"%PDF-1.7\n" + body + b"trailer\n<< /Root 1 0 R >>\n%%EOF\n"


def _pages(count: int, first: int = 3) -> list[bytes]:
    kids = b" ".join(b"%d 0 R" % (first + i) for i in range(count))
    return [
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % count,
        *(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>" for _ in range(count)),
    ]


def test_a_pdfs_pages_are_counted_in_plain_and_compressed_objects() -> None:
    plain = _pdf(b"<< /Type /Catalog /Pages 2 0 R >>", *_pages(3))
    assert pdf_pages(plain) == 3
    # PDF 1.5 object streams: the page tree sits inside a zlib-compressed stream.
    packed = zlib.compress(b"2 0 3 60 " + b" ".join(_pages(5)))
    stream = b"<< /Type /ObjStm /N 6 /First 9 /Filter /FlateDecode /Length %d >>\nstream\n" % len(
        packed
    )
    compressed = _pdf(b"<< /Type /Catalog /Pages 2 0 R >>", stream + packed + b"\nendstream")
    assert pdf_pages(compressed) == 5


def test_a_pdf_it_cannot_count_has_no_pages() -> None:
    assert pdf_pages(b"%PDF-1.4\n" + bytes(1000)) is None  # no page objects found
    assert pdf_pages(b"not a pdf") is None
    # A hostile count of 5,000 digits is not a count (int() would refuse it with a traceback).
    assert pdf_pages(b"%PDF-1.7\n<< /Type /Pages /Count " + b"9" * 5000 + b" >>") is None
    # A broken stream is skipped, not raised.
    broken = _pdf(b"<< /Type /ObjStm /N 1 >>\nstream\nnot zlib\nendstream")
    assert pdf_pages(broken) is None


def test_a_compressed_bomb_inflates_only_so_far(monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = zlib.compress(bytes(64 << 20), 9)  # 64 MiB of zeros in about 64 KB
    stream = b"<< /Type /ObjStm /N 1 /Length %d >>\nstream\n" % len(bomb)
    data = _pdf(*_pages(2), stream + bomb + b"\nendstream", stream + bomb + b"\nendstream")
    inflated: list[int] = []
    real = zlib.decompressobj

    class Counting:
        def __init__(self) -> None:
            self.inner = real()

        def decompress(self, chunk: bytes, limit: int) -> bytes:
            out = self.inner.decompress(chunk, limit)
            inflated.append(len(out))
            return out

    monkeypatch.setattr(media_tokens.zlib, "decompressobj", Counting)
    assert pdf_pages(data) == 2
    assert sum(inflated) <= 16 << 20  # of 128 MiB the two streams hold


def test_a_pdf_costs_its_pages_on_gemini_and_its_bytes_elsewhere(tmp_path: Path) -> None:
    path = tmp_path / "report.pdf"
    path.write_bytes(_pdf(b"<< /Type /Catalog /Pages 2 0 R >>", *_pages(4)))
    pdf = Source.from_file(path)
    assert source_pdf_pages(pdf) == 4
    assert source_tokens(pdf, "gemini", "gemini-2.5-flash") == 4 * 258
    assert source_tokens(pdf, "vertex", "gemini-3-pro-preview") == 4 * 560
    assert source_tokens(pdf, "anthropic", "claude-sonnet-4-5") is None  # text and images: bytes


def test_a_file_is_read_once_per_version_however_many_calls_estimate_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A quota, the mock and the bridge each estimate every call of a fan-out over one file.
    opened: list[str] = []
    real_open = open

    def counting_open(path: object, *args: object, **kwargs: object) -> object:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", counting_open)
    for name in ("wide.png", "clip.wav"):
        copy = tmp_path / name
        copy.write_bytes((MEDIA / name).read_bytes())
        source = Source.from_file(copy)
        first = [source_tokens(source, "gemini", "gemini-2.5-flash") for _ in range(50)]
        assert len(set(first)) == 1 and opened.count(str(copy)) == 1
        # A new version of the file (another size) is read again.
        copy.write_bytes((MEDIA / name).read_bytes() + bytes(8))
        source_tokens(Source.from_file(copy), "gemini", "gemini-2.5-flash")
        assert opened.count(str(copy)) == 2
