"""`pollux.image_tokens`: an image's size from its header, and what a provider charges for it."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

from pollux import Source
from pollux.image_tokens import image_size, image_tokens, source_image_size

IMAGES = Path(__file__).resolve().parent / "images"

# Made with Pillow 13 (one colour each, so the files stay small).
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
    data = (IMAGES / name).read_bytes()
    assert image_size(data) == size
    assert source_image_size(Source.from_file(IMAGES / name)) == size
    assert source_image_size(Source.from_bytes(data, mime_type="image/x-any")) == size


def test_a_jpeg_whose_size_sits_after_large_metadata_is_still_read(tmp_path: Path) -> None:
    # A 200 KB APP2 segment (an ICC profile's size) between the SOI marker and the frame.
    jpeg = (IMAGES / "baseline.jpg").read_bytes()
    app2 = b"\xff\xe2" + struct.pack(">H", 65_535) + bytes(65_533)
    padded = jpeg[:2] + app2 * 3 + jpeg[2:]
    path = tmp_path / "big-profile.jpg"
    path.write_bytes(padded)
    assert image_size(padded[: 1 << 16]) is None  # the first 64 KiB do not reach the frame
    assert source_image_size(Source.from_file(path)) == (640, 480)


def test_a_top_down_bmp_reads_its_height_as_positive() -> None:
    bmp = bytearray((IMAGES / "tiny.bmp").read_bytes())
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
    png.write_bytes((IMAGES / "wide.png").read_bytes())
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
