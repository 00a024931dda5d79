"""What one image costs in input tokens, estimated before the call.

Providers count an image by its pixels, not its bytes: each resizes a large image to its own
limits and charges a fixed amount per tile or patch, so a 300 KB photo costs about a thousand
tokens, not the 75,000 its bytes would suggest at four characters per token. A quota's
tokens-per-minute hold and a hard token budget need a figure that errs high but not absurdly
so; this module gives one per provider and model, from the image's size when it is known (read
from the file's header: PNG, JPEG, GIF, WebP and BMP) and otherwise the most any image can cost
there. The provider's reported usage settles the charge either way.

The rules follow each provider's published counting (December 2026), taking the most a setting
pollux leaves to the provider (OpenAI's ``detail: auto``, Gemini's default media resolution) can
cost:

* OpenAI: 512-px tiles after fitting the image in 2048 x 2048 and its short side in 768 (85
  tokens plus 170 per tile; gpt-4o-mini 2,833 plus 5,667), or, for the mini and nano models
  that count 32-px patches, at most 1,536 patches times the model's multiplier.
* Anthropic: the larger of ``width x height / 750`` and one token per 28-px patch, at most
  4,784 (the high-resolution tier's cap).
* Gemini 3 and later: 1,120 per image; earlier models 258 per image up to 384 px a side, else
  258 per 768-px tile (an image of unknown size counts as 3,072 px square, 16 tiles).
* Anything else (local servers, unknown OpenRouter vendors): the largest of the rules above for
  the size given; 16,384 (a 12.8-megapixel image in 28-px patches) when the size is unknown.

Example:
    >>> from pollux.image_tokens import image_tokens
    >>> image_tokens("anthropic", "claude-sonnet-4-5", (1024, 768))
    1049
    >>> image_tokens("openai", "gpt-4o", None)
    1445
"""

from __future__ import annotations

import math
import re
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pollux.source import Source

__all__ = ["image_size", "image_tokens", "source_image_size"]

# OpenAI's tile rule: fit in 2048 x 2048, then the short side in 768, then 512-px tiles.
_OPENAI_FIT = 2048
_OPENAI_SHORT = 768
_OPENAI_TILE = 512
# The most tiles an image makes under that rule (768 x 2048: 2 x 4).
_OPENAI_MAX_TILES = 8
_OPENAI_PATCH = 32
_OPENAI_MAX_PATCHES = 1536
# Models that count 32-px patches, with the multiplier they bill patches at.
_OPENAI_PATCH_MODELS = (
    (re.compile(r"(?:^|/)(?:gpt-5(?:\.\d+)?|gpt-4\.1)-nano"), 2.46),
    (re.compile(r"(?:^|/)(?:gpt-5(?:\.\d+)?|gpt-4\.1)-mini"), 1.62),
    (re.compile(r"(?:^|/)o4-mini"), 1.72),
)
_OPENAI_4O_MINI = re.compile(r"(?:^|/)gpt-4o-mini")

_ANTHROPIC_PIXELS_PER_TOKEN = 750
_ANTHROPIC_PATCH = 28
_ANTHROPIC_MAX = 4784

_GEMINI_TILE = 768
_GEMINI_SMALL = 384
_GEMINI_TOKENS = 258
_GEMINI_UNKNOWN_TILES = 16
_GEMINI_FIXED = 1120  # Gemini 3 and later, default (high) media resolution
_GEMINI_MAJOR = re.compile(r"gemini-(\d+)")

_GENERIC_UNKNOWN = 16_384

_GOOGLE = frozenset({"gemini", "vertex"})
_OPENAI = frozenset({"openai", "azure_openai"})


def image_tokens(provider: str, model: str | None, size: tuple[int, int] | None = None) -> int:
    """Estimate the input tokens one image costs on a provider's model.

    Args:
        provider: The pollux provider name (``"openai"``, ``"anthropic"``, ``"gemini"``, ...).
        model: The model (an OpenRouter ``vendor/model`` picks the vendor's rule), or None.
        size: The image's ``(width, height)`` in pixels (see `image_size`), or None for the
            most any image can cost there.

    Returns:
        A whole number of tokens, at least 1, that errs high rather than low.
    """
    name = (model or "").strip().lower()
    family = _family(provider, name)
    if size is not None:
        width, height = (max(1, int(side)) for side in size)
        size = (width, height)
    if family == "openai":
        return _openai(name, size)
    if family == "anthropic":
        return _anthropic(size)
    if family == "gemini":
        return _gemini(name, size)
    if size is None:
        return _GENERIC_UNKNOWN
    return max(_openai("", size), _anthropic_uncapped(size), _gemini("", size))


def image_size(data: bytes) -> tuple[int, int] | None:
    """Read an image's ``(width, height)`` from the start of its file.

    Args:
        data: The file's first bytes (a JPEG's size may sit after its metadata, so pass
            enough to reach it: the first 64 KiB serve almost every file).

    Returns:
        The size in pixels for a PNG, JPEG, GIF, WebP or BMP header, else None.
    """
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
            return _checked(struct.unpack(">II", data[16:24]))
        if data[:6] in (b"GIF87a", b"GIF89a"):
            return _checked(struct.unpack("<HH", data[6:10]))
        if data.startswith(b"\xff\xd8"):
            return _jpeg(data)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp(data)
        if data.startswith(b"BM") and len(data) >= 26:
            width, height = struct.unpack("<ii", data[18:26])
            return _checked((width, abs(height)))
    except struct.error:
        return None
    return None


#: How much of a local image is read for its size: enough for almost every file's header; a
#: JPEG whose size sits after larger metadata (a big ICC profile or thumbnail) is read up to
#: `_HEAD_MAX_BYTES`.
_HEAD_BYTES = 1 << 16
_HEAD_MAX_BYTES = 1 << 21


def source_image_size(source: Source) -> tuple[int, int] | None:
    """Read the ``(width, height)`` of an image source whose bytes are local.

    Args:
        source: A `Source` (a file or in-memory bytes; nothing remote is fetched and no custom
            loader is called).

    Returns:
        The size in pixels, or None when the source is not an image whose header this module
        reads, is remote, or cannot be read (the caller then estimates for an unknown size).
    """
    if not source.mime_type.lower().startswith("image/"):
        return None
    data = source._data
    if data is not None:
        return image_size(data[:_HEAD_MAX_BYTES])
    path = source._path
    if path is None:
        return None
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
            size = image_size(head)
            if size is None and head.startswith(b"\xff\xd8") and len(head) == _HEAD_BYTES:
                size = image_size(head + handle.read(_HEAD_MAX_BYTES - _HEAD_BYTES))
    except OSError:
        return None
    return size


def _family(provider: str, model: str) -> str:
    if provider in _OPENAI:
        return "openai"
    if provider == "anthropic":
        return "anthropic"
    if provider in _GOOGLE:
        return "anthropic" if model.startswith("claude") else "gemini"
    if provider == "openrouter":
        vendor = model.split("/", 1)[0]
        return {"openai": "openai", "anthropic": "anthropic", "google": "gemini"}.get(vendor, "")
    return ""


def _openai(model: str, size: tuple[int, int] | None) -> int:
    for pattern, multiplier in _OPENAI_PATCH_MODELS:
        if pattern.search(model):
            patches = _OPENAI_MAX_PATCHES
            if size is not None:
                width, height = size
                patches = min(patches, _ceil(width, _OPENAI_PATCH) * _ceil(height, _OPENAI_PATCH))
            return math.ceil(patches * multiplier)
    base, per_tile = (2833, 5667) if _OPENAI_4O_MINI.search(model) else (85, 170)
    tiles = _OPENAI_MAX_TILES if size is None else _openai_tiles(*size)
    return base + per_tile * tiles


def _openai_tiles(width: int, height: int) -> int:
    scale = min(1.0, _OPENAI_FIT / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, _OPENAI_SHORT / min(w, h))
    w, h = w * scale, h * scale
    return math.ceil(w / _OPENAI_TILE) * math.ceil(h / _OPENAI_TILE)


def _anthropic(size: tuple[int, int] | None) -> int:
    return _ANTHROPIC_MAX if size is None else min(_ANTHROPIC_MAX, _anthropic_uncapped(size))


def _anthropic_uncapped(size: tuple[int, int]) -> int:
    width, height = size
    by_area = math.ceil(width * height / _ANTHROPIC_PIXELS_PER_TOKEN)
    return max(by_area, _ceil(width, _ANTHROPIC_PATCH) * _ceil(height, _ANTHROPIC_PATCH))


def _gemini(model: str, size: tuple[int, int] | None) -> int:
    major = _GEMINI_MAJOR.search(model)
    if major is not None and int(major.group(1)) >= 3:
        return _GEMINI_FIXED
    if size is None:
        return _GEMINI_TOKENS * _GEMINI_UNKNOWN_TILES
    width, height = size
    if width <= _GEMINI_SMALL and height <= _GEMINI_SMALL:
        return _GEMINI_TOKENS
    return _GEMINI_TOKENS * _ceil(width, _GEMINI_TILE) * _ceil(height, _GEMINI_TILE)


def _ceil(value: int, step: int) -> int:
    return -(-value // step)


def _checked(size: tuple[int, int]) -> tuple[int, int] | None:
    width, height = size
    return (width, height) if width > 0 and height > 0 else None


# Start-of-frame markers carry the size; C4 (huffman tables), C8 (reserved) and CC (arithmetic
# conditioning) share the range but are not frames.
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # standalone markers have no length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return _checked((width, height))
        if marker == 0xDA or length < 2:  # the image data starts: no frame header came first
            return None
        at += 2 + length
    return None


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return _checked((width, height)) if len(data) >= 30 else None
    if chunk == b"VP8L" and data[20:21] == b"\x2f":
        bits = int.from_bytes(data[21:25], "little")
        return _checked(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return _checked((width & 0x3FFF, height & 0x3FFF))
    return None
