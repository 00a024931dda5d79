"""Large file sources are read and encoded off the event loop (other calls keep running)."""

from __future__ import annotations

import base64
import threading
from pathlib import Path
from typing import Any

import pytest

import pollux
from pollux import Config, Source
from pollux.providers.openai_compat import provider as chat_provider
from pollux.testing import Emulator


async def test_large_files_are_encoded_in_a_worker_thread(
    emu: Emulator, local_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []
    from pollux.providers.openai_compat.compile import source_part as original

    def spy(source: Source, **kwargs: Any) -> dict[str, Any]:
        threads.append(threading.get_ident())
        return original(source, **kwargs)

    # The provider module's own reference is the one prepare_sources calls.
    monkeypatch.setattr(chat_provider, "source_part", spy)
    big = tmp_path / "big.png"
    big.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8192)  # 2 MB
    small = tmp_path / "small.png"
    small.write_bytes(b"\x89PNG\r\n\x1a\nsmall")
    loop_thread = threading.get_ident()

    await pollux.run("Describe", source=Source.from_file(big), config=local_config)
    assert threads and threads[-1] != loop_thread
    body = emu.requests_for("local.chat")[-1].json
    assert isinstance(body, dict)
    url = body["messages"][0]["content"][0]["image_url"]["url"]
    assert base64.b64decode(url.split(",", 1)[1]) == big.read_bytes()

    await pollux.run("Describe", source=Source.from_file(small), config=local_config)
    assert threads[-1] == loop_thread
