"""The deterministic default model, token counting and the prefix cache.

Every wire format translates its request into a :class:`ModelRequest` and renders the
:class:`ModelOutput`; the model itself knows nothing about HTTP or JSON shapes. Its rules:

- The answer text is derived from the request: ``"Emulated reply to: <last user text>"``, with a
  note of attached images, audio and files, or ``"Tool results: <outputs>"`` after tool outputs.
- With a JSON schema, the answer is a value generated to validate against it.
- A function tool is called (arguments generated from its parameter schema) when ``tool_choice``
  requires it or names it, or when the latest user text mentions the tool's name, and no tool
  output has arrived since that user message.
- Tokens are words and punctuation marks; an image counts 85 tokens, audio 50, a file 100.
- Repeated prompt prefixes are reported as cached tokens, in blocks, on the virtual clock.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._clock import VirtualClock
from ._schema import generate_value
from ._script import Reply, ToolCall

_TOKEN = re.compile(r"\w+|[^\w\s]")
ATTACHMENT_TOKENS = {"image": 85, "audio": 50, "file": 100}
_EFFORT_TOKENS = {"none": 0, "minimal": 8, "low": 16, "medium": 64, "high": 256, "xhigh": 512}


def count_tokens(text: str) -> int:
    """Deterministic token count: words and punctuation marks."""
    return len(_TOKEN.findall(text))


def truncate_tokens(text: str, limit: int) -> str:
    """The prefix of ``text`` holding its first ``limit`` tokens."""
    if limit <= 0:
        return ""
    for index, match in enumerate(_TOKEN.finditer(text)):
        if index == limit - 1:
            return text[: match.end()]
    return text


@dataclass(slots=True)
class FunctionSpec:
    """A function tool offered to the model."""

    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ModelRequest:
    """A generation request, independent of the wire format."""

    model: str
    prompt: list[str] = field(default_factory=list)
    last_user_text: str = ""
    attachments: Counter[str] = field(default_factory=Counter)
    tool_results: list[str] = field(default_factory=list)
    tools: list[FunctionSpec] = field(default_factory=list)
    tool_choice: str = "auto"
    schema: Mapping[str, Any] | None = None
    json_mode: bool = False
    reasoning_effort: str | None = None
    max_output_tokens: int | None = None

    def add_text(self, text: str) -> None:
        """Append prompt text (counted and cached)."""
        if text:
            self.prompt.append(text)

    def add_attachment(self, kind: str, identity: str) -> None:
        """Append an attachment (fixed token cost per kind)."""
        self.attachments[kind] += 1
        digest = hashlib.blake2b(identity.encode(), digest_size=8).hexdigest()
        self.prompt.append(f"\x00{kind}:{digest}")


@dataclass(slots=True)
class ModelOutput:
    """What the model produced, with usage."""

    text: str
    reasoning: str | None
    tool_calls: list[ToolCall]
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int
    truncated: bool
    cache_write_tokens: int = 0


def prompt_tokens(prompt: list[str]) -> list[str]:
    """The prompt as a flat token list (attachments expand to their fixed cost)."""
    tokens: list[str] = []
    for piece in prompt:
        if piece.startswith("\x00"):
            kind = piece[1:].split(":", 1)[0]
            tokens.extend([piece] * ATTACHMENT_TOKENS.get(kind, 100))
        else:
            tokens.extend(_TOKEN.findall(piece))
    return tokens


_CLAUDE_MODERN = re.compile(r"claude-([a-z]+)-(\d+)(?:-(\d{1,2}))?(?:-\d{8})?(?:$|[-.@])")
_CLAUDE_LEGACY = re.compile(r"claude-(\d+)(?:-(\d))?-([a-z]+)")


def min_cacheable_tokens(model: str) -> int:
    """The shortest prompt prefix ``model``'s provider caches, as each provider documents it.

    Anthropic (prompt caching, "cache limitations"): 4096 tokens for Claude Opus 4.5+ and Haiku
    4.5+, 2048 for the Claude 3 Haiku models, 1024 for the others. Gemini (context caching): 4096
    for Pro models, 1024 for the others. OpenAI (prompt caching): 1024 for every model.
    """
    name = model.lower().rsplit("/", 1)[-1].replace(".", "-")  # OpenRouter: anthropic/x.y
    modern, legacy = _CLAUDE_MODERN.search(name), _CLAUDE_LEGACY.search(name)
    if modern is not None and not modern.group(1).isdigit():
        tier, version = modern.group(1), (int(modern.group(2)), int(modern.group(3) or 0))
    elif legacy is not None:
        tier, version = legacy.group(3), (int(legacy.group(1)), int(legacy.group(2) or 0))
    else:
        return 4096 if "gemini" in name and "pro" in name else 1024
    if tier in ("opus", "haiku") and version >= (4, 5):
        return 4096
    return 2048 if tier == "haiku" and version[0] == 3 else 1024


class PrefixCache:
    """Remembers prompt prefixes at block boundaries, the way automatic prompt caching does.

    A prefix of at least the minimum cacheable size that was seen within ``ttl`` seconds
    (virtual) is a hit; hits grow in steps of ``block`` tokens. The minimum is ``min_tokens``
    when set, else each model's own (:func:`min_cacheable_tokens`). Touched only from the
    server thread.
    """

    def __init__(
        self,
        clock: VirtualClock,
        min_tokens: int | None = None,
        block: int = 128,
        ttl: float = 300.0,
        max_entries: int = 200_000,
    ) -> None:
        self._clock = clock
        self.min_tokens = None if min_tokens is None else max(1, min_tokens)
        self.block = max(1, block)
        self.ttl = ttl
        self._max = max_entries
        self._seen: dict[bytes, float] = {}

    def minimum(self, model: str) -> int:
        """The minimum cacheable prefix for ``model`` (the emulator-wide setting wins)."""
        return self.min_tokens if self.min_tokens is not None else min_cacheable_tokens(model)

    def lookup_and_store(self, model: str, tokens: list[str]) -> int:
        """Return the cached prefix length for ``tokens`` and remember all of its prefixes."""
        minimum = self.minimum(model)
        if len(tokens) < minimum:
            return 0
        now = self._clock.now()
        running = hashlib.blake2b(model.encode(), digest_size=16)
        hit = 0
        position = 0
        boundary = minimum
        while boundary <= len(tokens):
            running.update("\x1f".join(tokens[position:boundary]).encode())
            running.update(b"\x1e")
            position = boundary
            key = running.copy().digest()
            seen = self._seen.get(key)
            step = minimum if hit == 0 else self.block
            if seen is not None and now - seen <= self.ttl and hit == boundary - step:
                hit = boundary
            self._seen[key] = now
            boundary += self.block
        if len(self._seen) > self._max:
            # Forget the oldest half; dicts keep insertion order.
            for key in list(self._seen)[: self._max // 2]:
                del self._seen[key]
        return hit


def _default_tool_call(request: ModelRequest) -> FunctionSpec | None:
    if not request.tools or request.tool_choice == "none" or request.tool_results:
        return None
    if request.tool_choice == "required":
        return request.tools[0]
    if request.tool_choice.startswith("function:"):
        wanted = request.tool_choice.split(":", 1)[1]
        return next((t for t in request.tools if t.name == wanted), None)
    text = request.last_user_text
    return next((t for t in request.tools if t.name and t.name in text), None)


def default_text(request: ModelRequest) -> str:
    """The default answer text for ``request``."""
    if request.tool_results:
        return "Tool results: " + "; ".join(request.tool_results)
    text = f"Emulated reply to: {request.last_user_text}"
    if request.attachments:
        notes = ", ".join(
            f"{request.attachments[k]} {k}"
            for k in ("image", "audio", "file")
            if k in request.attachments
        )
        text += f" [{notes}]"
    return text


def generate(
    request: ModelRequest,
    reply: Reply | None,
    cache: PrefixCache,
    new_call_id: Callable[[], str],
) -> ModelOutput:
    """Produce the answer to ``request``, from ``reply`` where given, else by the default rules."""
    reply = reply or Reply()
    calls: list[ToolCall] = []
    if reply.tool_calls:
        calls = [
            c if c.call_id else ToolCall(c.name, c.arguments, new_call_id())
            for c in reply.tool_calls
        ]
    elif reply.text is None and not reply.has_structured:
        tool = _default_tool_call(request)
        if tool is not None:
            args = generate_value(dict(tool.parameters) or {"type": "object"})
            calls = [ToolCall(tool.name, args if isinstance(args, dict) else {}, new_call_id())]
    if reply.has_structured:
        text = json.dumps(reply.structured, ensure_ascii=False)
    elif reply.text is not None:
        text = reply.text
    elif calls:
        text = ""
    elif request.schema is not None:
        text = json.dumps(generate_value(request.schema), ensure_ascii=False)
    elif request.json_mode:
        text = json.dumps({"answer": default_text(request)}, ensure_ascii=False)
    else:
        text = default_text(request)
    effort = request.reasoning_effort
    reasoning = reply.reasoning
    if reasoning is None and effort not in (None, "none"):
        reasoning = f"Reasoning about: {request.last_user_text or 'the request'}"
    reasoning_tokens = 0
    if reasoning is not None:
        reasoning_tokens = count_tokens(reasoning) + _EFFORT_TOKENS.get(effort or "medium", 64)
    if reply.reasoning_tokens is not None:
        reasoning_tokens = reply.reasoning_tokens
    tokens = prompt_tokens(request.prompt)
    input_tokens = len(tokens) if reply.input_tokens is None else reply.input_tokens
    cached = cache.lookup_and_store(request.model, tokens)
    if reply.cached_tokens is not None:
        cached = reply.cached_tokens
    visible = count_tokens(text) + sum(
        count_tokens(c.name) + count_tokens(c.arguments_json()) for c in calls
    )
    output_tokens = visible + reasoning_tokens
    truncated = reply.truncated
    limit = request.max_output_tokens
    if limit is not None and output_tokens > limit:
        truncated = True
        room = max(0, limit - reasoning_tokens)
        text = truncate_tokens(text, room)
        calls = []  # a cut-off function call is never emitted
        output_tokens = limit
        reasoning_tokens = min(reasoning_tokens, limit)
    if reply.output_tokens is not None:
        output_tokens = reply.output_tokens
    return ModelOutput(
        text=text,
        reasoning=reasoning,
        tool_calls=calls,
        input_tokens=input_tokens,
        cached_tokens=min(cached, input_tokens),
        output_tokens=output_tokens,
        reasoning_tokens=reasoning_tokens,
        truncated=truncated,
        cache_write_tokens=min(
            reply.cache_write_tokens or 0, input_tokens - min(cached, input_tokens)
        ),
    )


def chunk_text(text: str, size: int = 24) -> list[str]:
    """Split ``text`` into stream deltas of about ``size`` characters, on word boundaries."""
    if not text:
        return []
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            space = text.rfind(" ", start + 1, end)
            if space > start:
                end = space
        pieces.append(text[start:end])
        start = end
    return pieces
