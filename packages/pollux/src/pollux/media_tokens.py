"""What an image, an audio clip, a video or a PDF costs in input tokens, before the call.

Providers count media by pixels and seconds, not bytes: each resizes a large image to its own
limits and charges a fixed amount per tile or patch, and counts audio and video per second, so
a 300 KB photo costs about a thousand tokens and a 5 MB, five-minute MP3 about 10,000, not the
75,000 and 1,250,000 their bytes would suggest at four characters per token. A quota's
tokens-per-minute hold and a hard token budget need a figure that errs high but not absurdly
so; this module gives one, from what a file says (an image's size: PNG, JPEG, GIF, WebP, BMP;
a clip's duration: WAV, MP3, FLAC, MP4/M4A/MOV; a PDF's pages) and otherwise, for an image, the
most any image can cost on the model. The provider's reported usage settles the charge either way.

Audio counts 32 tokens a second (Gemini's published rate, the highest of the providers pollux
sends audio to), video on Gemini and Vertex AI 258 tokens per sampled frame (one a second
unless `Source.with_gemini_video_settings` sets ``fps``) plus its audio's 32; a clip whose
duration is not read, a video on another provider and any other media have no estimate here
(`source_tokens` returns None) and are counted by their bytes. So are PDFs, except on Gemini
and Vertex AI, which count a page as an image: 258 tokens (560 from Gemini 3, its default
document resolution); the other providers add a page's text to its image, which its page count
does not bound.

Images follow each provider's published counting (December 2026), taking the most a setting
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
    >>> from pollux.media_tokens import image_tokens
    >>> image_tokens("anthropic", "claude-sonnet-4-5", (1024, 768))
    1049
    >>> image_tokens("openai", "gpt-4o", None)
    1445
"""

from __future__ import annotations

import functools
import math
import os
import re
import struct
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pollux.source import Source

__all__ = [
    "AUDIO_TOKENS_PER_SECOND",
    "PDF_PAGE_TOKENS",
    "VIDEO_FRAME_TOKENS",
    "image_size",
    "image_tokens",
    "media_seconds",
    "pdf_pages",
    "source_image_size",
    "source_media_seconds",
    "source_pdf_pages",
    "source_tokens",
]

#: Input tokens per second of audio.
AUDIO_TOKENS_PER_SECOND = 32
#: Input tokens per sampled video frame (Gemini's default media resolution).
VIDEO_FRAME_TOKENS = 258

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
    if not _mime(source).startswith("image/"):
        return None
    data = source._data
    if data is not None:
        return image_size(data[:_HEAD_MAX_BYTES])
    key = _file_key(source)
    return None if key is None else _file_image_size(*key)


def _file_key(source: Source) -> tuple[str, int, int] | None:
    """(path, size, mtime) of a file source: what the readers below remember a file by.

    A quota, the mock and the bridge each estimate every call, and a fan-out sends many calls
    over one file; its header is read once per version of the file, not once per estimate.
    """
    if source._path is None:
        return None
    try:
        stat = os.stat(source._path)
    except OSError:
        return None
    return str(source._path), stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=256)
def _file_image_size(path: str, size: int, mtime_ns: int) -> tuple[int, int] | None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
            found = image_size(head)
            if found is None and head.startswith(b"\xff\xd8") and len(head) == _HEAD_BYTES:
                found = image_size(head + handle.read(_HEAD_MAX_BYTES - _HEAD_BYTES))
    except OSError:
        return None
    return found


def _mime(source: Source) -> str:
    return source.mime_type.split(";", 1)[0].strip().lower()


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


# -- documents ---------------------------------------------------------------------------------

#: Input tokens per PDF page on Gemini and Vertex AI before Gemini 3 (a page is an image).
PDF_PAGE_TOKENS = 258
# Gemini 3 and later: a page at the default (medium) media resolution for documents.
_GEMINI_PDF_PAGE = 560
# A PDF larger than this is not read for its pages (its bytes count): reading and searching it
# whole would cost more than the estimate is worth.
_PDF_MAX_BYTES = 64 << 20
# What the object streams of one PDF may inflate to, in all (a compressed bomb stops there).
_PDF_MAX_INFLATED = 16 << 20
_PDF_LEAF = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
# A count of up to nine digits: a longer one is hostile (and int() refuses 4,300 digits).
_PDF_TREE_COUNT = re.compile(rb"/Type\s*/Pages(?![A-Za-z])[^>]{0,512}?/Count\s+(\d{1,9})(?!\d)")
_PDF_COUNT_TREE = re.compile(rb"/Count\s+(\d{1,9})(?!\d)[^>]{0,512}?/Type\s*/Pages(?![A-Za-z])")
_PDF_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm[^>]*>>\s*stream\r?\n")


def pdf_pages(data: bytes) -> int | None:
    """Count a PDF's pages from its bytes (object streams included).

    Args:
        data: The whole file.

    Returns:
        The page count, erring high (a page an incremental update replaced may count twice), or
        None when ``data`` is not a PDF or no page is found in it (an encrypted object stream
        is not read).
    """
    if not data.startswith(b"%PDF-"):
        return None
    texts = [data]
    budget = _PDF_MAX_INFLATED
    for found in _PDF_OBJECT_STREAM.finditer(data):
        if budget <= 0:
            break
        inflater = zlib.decompressobj()
        try:
            text = inflater.decompress(data[found.end() : found.end() + budget], budget)
        except zlib.error:
            continue
        budget -= len(text)
        texts.append(text)
    leaves = sum(len(_PDF_LEAF.findall(text)) for text in texts)
    counts = [
        int(number)
        for text in texts
        for pattern in (_PDF_TREE_COUNT, _PDF_COUNT_TREE)
        for number in pattern.findall(text)
    ]
    pages = max([leaves, *counts])
    return pages or None


def source_pdf_pages(source: Source) -> int | None:
    """Count the pages of a PDF source whose bytes are local (see `pdf_pages`).

    One above 64 MiB, a remote source or one that cannot be read gives None.
    """
    if _mime(source) != "application/pdf":
        return None
    data = source._data
    if data is not None:
        return pdf_pages(data) if len(data) <= _PDF_MAX_BYTES else None
    key = _file_key(source)
    if key is None or key[1] > _PDF_MAX_BYTES:
        return None
    return _file_pdf_pages(*key)


@functools.lru_cache(maxsize=256)
def _file_pdf_pages(path: str, size: int, mtime_ns: int) -> int | None:
    try:
        with open(path, "rb") as handle:
            return pdf_pages(handle.read(_PDF_MAX_BYTES + 1))
    except OSError:
        return None


# -- audio and video ---------------------------------------------------------------------------


def source_tokens(source: Source, provider: str, model: str | None) -> int | None:
    """Estimate the input tokens of a media source whose size or duration is readable.

    Args:
        source: A `Source`.
        provider: The pollux provider name.
        model: The model (the rule for images depends on it), or None.

    Returns:
        For an image, `image_tokens` of its size (the model's most for an image whose size is
        not read); for audio of known duration, 32 tokens a second; for a video of known
        duration on Gemini or Vertex AI, 258 per sampled frame plus 32 a second. None for
        anything else (text, PDFs, a clip whose duration is not read, a video elsewhere): count
        those by their bytes.
    """
    mime = _mime(source)
    if mime.endswith("+xml"):  # SVG is text to a model: its bytes count
        return None
    gemini = _family(provider, (model or "").strip().lower()) == "gemini"
    if mime == "application/pdf":
        pages = source_pdf_pages(source) if gemini else None
        return None if pages is None else pages * _pdf_page_tokens(model)
    if mime.startswith("image/"):
        return image_tokens(provider, model, source_image_size(source))
    if not mime.startswith(("audio/", "video/")):
        return None
    seconds = source_media_seconds(source)
    if seconds is None:
        return None
    if mime.startswith("audio/"):
        return max(1, math.ceil(seconds * AUDIO_TOKENS_PER_SECOND))
    if not gemini:
        return None
    hints = source.gemini_video_settings_for(provider) or {}
    fps = hints.get("fps", 1.0)
    fps = float(fps) if isinstance(fps, (int, float)) and fps > 0 else 1.0
    per_second = math.ceil(fps * VIDEO_FRAME_TOKENS) + AUDIO_TOKENS_PER_SECOND
    return max(1, math.ceil(seconds * per_second))


def _pdf_page_tokens(model: str | None) -> int:
    major = _GEMINI_MAJOR.search((model or "").lower())
    return _GEMINI_PDF_PAGE if major is not None and int(major.group(1)) >= 3 else PDF_PAGE_TOKENS


def media_seconds(data: bytes) -> float | None:
    """Read an audio or video file's duration from its bytes.

    Args:
        data: The whole file (an MP4's duration may sit at its end; an MP3 without a frame
            count is timed by its size).

    Returns:
        Seconds for a WAV, MP3 (MPEG layer III), FLAC or MP4/M4A/MOV file, else None.
    """
    return _seconds(lambda at, n: data[at : at + n], len(data))


def source_media_seconds(source: Source) -> float | None:
    """Read the duration of an audio or video source whose bytes are local.

    Args:
        source: A `Source` (a file, read in small pieces, or in-memory bytes; nothing remote is
            fetched and no custom loader is called).

    Returns:
        Seconds, or None when the format is not one `media_seconds` reads, the source is
        remote or it cannot be read.
    """
    data = source._data
    if data is not None:
        return media_seconds(data)
    key = _file_key(source)
    return None if key is None else _file_seconds(*key)


@functools.lru_cache(maxsize=256)
def _file_seconds(path: str, size: int, mtime_ns: int) -> float | None:
    try:
        with open(path, "rb") as handle:

            def read_at(at: int, count: int) -> bytes:
                handle.seek(at)
                return handle.read(count)

            return _seconds(read_at, size)
    except OSError:
        return None


ReadAt = Callable[[int, int], bytes]
# How many boxes or chunks a reader walks before it gives up (a hostile file cannot spin it).
_MAX_STEPS = 4096


def _seconds(read_at: ReadAt, size: int) -> float | None:
    head = read_at(0, 12)
    try:
        if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
            seconds = _wav(read_at, size)
        elif head[4:8] == b"ftyp":
            seconds = _mp4(read_at, size)
        elif head[:4] == b"fLaC":
            seconds = _flac(read_at(0, 42))
        elif head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
            seconds = _mp3(read_at, size)
        else:
            return None
    except (struct.error, ValueError, IndexError, ZeroDivisionError):
        return None
    return seconds if seconds is not None and 0 < seconds < math.inf else None


def _wav(read_at: ReadAt, size: int) -> float | None:
    at, byte_rate = 12, 0
    for _ in range(_MAX_STEPS):
        header = read_at(at, 8)
        if len(header) < 8:
            return None
        chunk, length = header[:4], struct.unpack("<I", header[4:])[0]
        if chunk == b"fmt ":
            (byte_rate,) = struct.unpack("<I", read_at(at + 16, 4))
        elif chunk == b"data":
            # A stream written before its length was known says 0 or 0xFFFFFFFF: the rest.
            if length in (0, 0xFFFFFFFF) or at + 8 + length > size:
                length = size - at - 8
            return length / byte_rate if byte_rate else None
        at += 8 + length + (length & 1)
    return None


def _mp4(read_at: ReadAt, size: int) -> float | None:
    moov = _box(read_at, 0, size, b"moov")
    if moov is None:
        return None
    mvhd = _box(read_at, moov[0], moov[1], b"mvhd")
    if mvhd is None:
        return None
    body = read_at(mvhd[0], 32)
    if body[0] == 1:  # version 1: 64-bit times and duration
        timescale, duration = body[20:24], body[24:32]
    else:
        timescale, duration = body[12:16], body[16:20]
    return int.from_bytes(duration, "big") / int.from_bytes(timescale, "big")


def _box(read_at: ReadAt, start: int, end: int, wanted: bytes) -> tuple[int, int] | None:
    """The (body start, end) of the first ``wanted`` box between ``start`` and ``end``."""
    at = start
    for _ in range(_MAX_STEPS):
        if at + 8 > end:
            return None
        length, kind = struct.unpack(">I4s", read_at(at, 8))
        body = at + 8
        if length == 1:
            (length,) = struct.unpack(">Q", read_at(at + 8, 8))
            body = at + 16
        elif length == 0:
            length = end - at
        if length < body - at:
            return None
        if kind == wanted:
            return body, min(end, at + length)
        at += length
    return None


def _flac(head: bytes) -> float | None:
    # STREAMINFO, the first metadata block: 20 bits of sample rate ... 36 bits of samples.
    packed = int.from_bytes(head[18:26], "big")
    rate = packed >> 44
    samples = packed & ((1 << 36) - 1)
    return samples / rate if rate and samples else None


# MPEG audio layer III: kbps by bitrate index (MPEG-1; MPEG-2 and 2.5), Hz by rate index.
_MP3_KBPS = (
    (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
)
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
_MP3_SYNC_SEARCH = 1 << 16


def _mp3(read_at: ReadAt, size: int) -> float | None:
    start = 0
    tag = read_at(0, 10)
    if tag[:3] == b"ID3":
        syncsafe = tag[6:10]
        start = 10 + sum((byte & 0x7F) << (7 * (3 - i)) for i, byte in enumerate(syncsafe))
        if tag[5] & 0x10:  # a footer follows the tag
            start += 10
    window = read_at(start, _MP3_SYNC_SEARCH)
    for offset in range(len(window) - 4):
        if window[offset] == 0xFF and window[offset + 1] & 0xE0 == 0xE0:
            frame = _mp3_frame(window[offset : offset + 4])
            if frame is not None:
                break
    else:
        return None
    version, kbps, rate, mono = frame
    first = start + offset
    samples_per_frame = 1152 if version == 3 else 576
    # A Xing/Info (LAME) or VBRI header in the first frame counts the frames.
    side = (17 if mono else 32) if version == 3 else (9 if mono else 17)
    body = read_at(first + 4 + side, 12)
    if body[:4] in (b"Xing", b"Info") and body[7] & 1:
        frames = int.from_bytes(body[8:12], "big")
        return frames * samples_per_frame / rate
    vbri = read_at(first + 36, 18)
    if vbri[:4] == b"VBRI":
        frames = int.from_bytes(vbri[14:18], "big")
        return frames * samples_per_frame / rate
    # No frame count: time the rest at a frame's bitrate. The second frame's, when there is
    # one: an encoder that writes its tag frame may give that frame a higher bitrate than the
    # stream's, which would time the file short.
    padding = (read_at(first + 2, 1) or b"\0")[0] >> 1 & 1
    length = (144 if version == 3 else 72) * kbps * 1000 // rate + padding
    second = _mp3_frame(read_at(first + length, 4))
    if second is not None and second[2] == rate:
        kbps = second[1]
    return (size - first) * 8 / (kbps * 1000)


def _mp3_frame(header: bytes) -> tuple[int, int, int, bool] | None:
    """(version bits, kbps, sample rate, mono) of a layer III frame header, else None."""
    if len(header) < 4 or header[0] != 0xFF or header[1] & 0xE0 != 0xE0:
        return None
    version = (header[1] >> 3) & 3
    layer = (header[1] >> 1) & 3
    bitrate = header[2] >> 4
    rate_index = (header[2] >> 2) & 3
    if version == 1 or layer != 1 or bitrate in (0, 15) or rate_index == 3:
        return None
    kbps = _MP3_KBPS[0 if version == 3 else 1][bitrate]
    return version, kbps, _MP3_RATES[version][rate_index], (header[3] >> 6) == 3
