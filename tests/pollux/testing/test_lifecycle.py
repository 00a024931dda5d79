"""The emulator's lifecycle: context managers, ports, process mode, the fixture, the clock."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from pollux.testing import Emulator, EmulatorError, VirtualClock, emulator_fixture

custom_emulator = emulator_fixture(models=["only-this"])


def _get(url: str) -> object:
    with urllib.request.urlopen(url) as response:
        return json.load(response)


def test_sync_context_manager_binds_loopback_and_releases_the_port() -> None:
    with Emulator() as emu:
        assert emu.url.startswith("http://127.0.0.1:")
        port = emu.port
        assert emu.base_url("openai") == f"http://127.0.0.1:{port}/openai/v1"
        assert emu.base_url("local") == f"http://127.0.0.1:{port}/local/v1"
        assert emu.base_url("gemini") == f"http://127.0.0.1:{port}/gemini"
        assert _get(emu.base_url("local") + "/models")
        # A keep-alive connection still open when the emulator closes.
        held = socket.create_connection(("127.0.0.1", port), timeout=5)
        held.sendall(b"GET /local/health HTTP/1.1\r\nhost: x\r\n\r\n")
        assert held.recv(64).startswith(b"HTTP/1.1 200")
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/local/health", timeout=2)
    with held:
        # Reading to the end returns (EOF) instead of timing out: the server closed its side.
        while held.recv(4096):
            pass
    assert not [t for t in threading.enumerate() if t.name == "pollux-emulator"]
    # The listening socket is gone: the port can be bound again (SO_REUSEADDR allows the
    # TIME_WAIT leftovers of closed connections, never a socket still listening).
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
        probe.listen()


async def test_async_context_manager_serves_async_clients() -> None:
    async with (
        Emulator() as emu,
        openai.AsyncOpenAI(base_url=emu.base_url("local"), api_key="k") as client,
    ):
        models = await client.models.list()
    assert [m.id for m in models.data] == ["emulator-model"]


def test_two_emulators_run_side_by_side() -> None:
    with Emulator() as first, Emulator() as second:
        assert first.port != second.port
        assert _get(first.base_url("local") + "/models") == _get(
            second.base_url("local") + "/models"
        )


def test_close_with_open_keep_alive_connections_is_clean() -> None:
    emu = Emulator().start()
    client = openai.OpenAI(base_url=emu.base_url("local"), api_key="k")
    client.models.list()
    emu.close()  # the client still holds a pooled connection
    client.close()
    emu.close()  # idempotent


def test_not_running_and_unknown_wire_errors_carry_hints() -> None:
    emu = Emulator()
    with pytest.raises(EmulatorError) as info:
        _ = emu.url
    assert "with Emulator()" in info.value.hint
    with emu, pytest.raises(EmulatorError, match="unknown wire"):
        emu.base_url("gopher")


def test_invalid_options_are_rejected() -> None:
    with pytest.raises(ValueError):
        Emulator(latency=-1)
    with pytest.raises(ValueError, match="unknown batch stage"):
        Emulator(batch_durations={"queued": 1})


def test_request_log_records_method_path_headers_and_json(emulator: Emulator) -> None:
    with openai.OpenAI(base_url=emulator.base_url("local"), api_key="sk-log") as client:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    (request,) = emulator.requests
    assert (request.method, request.path) == ("POST", "/local/v1/chat/completions")
    assert request.wire == "local" and request.matches("local.chat")
    assert request.headers["content-type"] == "application/json"
    assert request.json["model"] == "m"
    assert request.time == emulator.now()
    emulator.clear_requests()
    assert emulator.requests == []
    with pytest.raises(EmulatorError, match="no request"):
        _ = emulator.last_request


def test_the_factory_fixture_applies_its_options(custom_emulator: Emulator) -> None:
    with openai.OpenAI(base_url=custom_emulator.base_url("local"), api_key="k") as client:
        assert [m.id for m in client.models.list().data] == ["only-this"]


def test_virtual_clock_only_moves_forward() -> None:
    clock = VirtualClock(100.0)
    assert clock.advance(5) == 105.0 == clock.now()
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_process_mode_serves_from_a_child_process() -> None:
    with Emulator(process=True, models=["m"], api_key="sk-child") as emu:
        with openai.OpenAI(base_url=emu.base_url("local"), api_key="sk-child") as client:
            answer = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "from afar"}]
            )
            assert [m.id for m in client.models.list().data] == ["m"]
        assert answer.choices[0].message.content == "Emulated reply to: from afar"
        with pytest.raises(EmulatorError, match="child process"):
            emu.script("local")
        with pytest.raises(EmulatorError, match="child process"):
            _ = emu.requests
        start = emu.now()
        time.sleep(0.3)  # longer than the standalone command's clock tick: the clock stays put
        assert emu.now() == start
        assert emu.advance(90) == start + 90 == emu.now()
