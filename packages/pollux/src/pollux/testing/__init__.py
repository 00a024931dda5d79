"""pollux.testing: test pollux code (or any OpenAI-family or google-genai code) without a provider.

The :class:`Emulator` is a loopback HTTP server that speaks provider wire formats: point the
official SDK at ``emu.base_url("openai")`` (or ``"anthropic"``, ``"gemini"``, ``"local"``,
``"openrouter"``) and it runs its real HTTP, streaming and error paths against a deterministic
model. Script answers with :class:`Reply` (:class:`AnthropicReply` for the Messages API's own
knobs, :class:`GeminiReply` for Gemini's finish and block reasons) and :class:`ToolCall`, inject
failures with the :class:`Fault` types, move batch jobs, file states and cache lifetimes along
with ``emu.advance(seconds)``.

Example:
    >>> import json, urllib.request
    >>> with Emulator() as emu:
    ...     with urllib.request.urlopen(emu.base_url("local") + "/models") as answer:
    ...         json.load(answer)["object"]
    'list'

pytest: ``from pollux.testing.fixtures import emulator`` in a conftest gives each test a running
emulator; ``emulator_fixture(**options)`` builds one with other settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._emulator._clock import VirtualClock as VirtualClock
from ._emulator._emulator import Emulator as Emulator
from ._emulator._emulator import EmulatorError as EmulatorError
from ._emulator._faults import CutStream as CutStream
from ._emulator._faults import DropConnection as DropConnection
from ._emulator._faults import ErrorResponse as ErrorResponse
from ._emulator._faults import Fault as Fault
from ._emulator._faults import Latency as Latency
from ._emulator._faults import MalformedBody as MalformedBody
from ._emulator._faults import RawResponse as RawResponse
from ._emulator._faults import StreamError as StreamError
from ._emulator._log import RecordedRequest as RecordedRequest
from ._emulator._quota import EmulatorQuota as EmulatorQuota
from ._emulator._script import Reply as Reply
from ._emulator._script import ToolCall as ToolCall
from ._emulator.wires._anthropic.reply import AnthropicReply as AnthropicReply
from ._emulator.wires._gemini_reply import GeminiReply as GeminiReply


def emulator_fixture(**options: Any) -> Any:
    """Build a pytest fixture yielding a running :class:`Emulator` made with ``options``.

    Assign it in a conftest; the variable name is the fixture name::

        from pollux.testing import emulator_fixture

        strict_emulator = emulator_fixture(api_key="sk-test", models=["gpt-5-nano"])

    Args:
        **options: Keyword arguments for :class:`Emulator`.

    Returns:
        A pytest fixture function (function scope).
    """
    import pytest

    Emulator(**options)  # validate the options now, where the mistake is

    def _emulator() -> Iterator[Emulator]:
        with Emulator(**options) as emu:
            yield emu

    return pytest.fixture(_emulator)


__all__ = [
    "AnthropicReply",
    "CutStream",
    "DropConnection",
    "Emulator",
    "EmulatorError",
    "EmulatorQuota",
    "ErrorResponse",
    "Fault",
    "GeminiReply",
    "Latency",
    "MalformedBody",
    "RawResponse",
    "RecordedRequest",
    "Reply",
    "StreamError",
    "ToolCall",
    "VirtualClock",
    "emulator_fixture",
]
