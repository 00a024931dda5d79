"""Issue 31 (pollux library half): SDK imports, malformed answers, secrets under many tenants."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap

import pytest

import pollux
from pollux import APIError, Config, ConfigurationError, RetryPolicy
from pollux._scrub import REDACTED, scrub
from pollux.testing import Emulator, MalformedBody, Reply

_SPY = textwrap.dedent(
    """
    import asyncio, importlib.abc, json, os, sys, threading

    seen = {}

    class Spy(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "google.genai" and name not in seen:
                seen[name] = threading.current_thread() is threading.main_thread()
            return None

    sys.meta_path.insert(0, Spy())
    import pollux
    from pollux import Config, RetryPolicy
    from pollux.testing import Emulator

    with Emulator() as emu:
        os.environ["GOOGLE_GEMINI_BASE_URL"] = emu.base_url("gemini")
        config = Config(provider="gemini", model="gemini-2.5-flash", api_key="emulator-key-012345",
                        retry=RetryPolicy(max_attempts=1, max_elapsed_s=60))
        answers = {"gemini": asyncio.run(pollux.run("Hi", config=config)).text != ""}
    print(json.dumps({"on_main_thread": seen, "answered": answers}))
    """
)


def test_the_first_sdk_call_imports_its_sdk_off_the_event_loop() -> None:
    # A fresh process (the import happens once): the SDK is imported in a worker thread before
    # the deadline starts, not on the event loop's thread inside the attempt. Gemini stands for
    # the three SDK providers (one code path, providers/_warm.py; its SDK imports fastest).
    done = subprocess.run(
        [sys.executable, "-c", _SPY], capture_output=True, text=True, timeout=120, check=True
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["answered"] == {"gemini": True}
    assert report["on_main_thread"] == {"google.genai": False}


@pytest.mark.parametrize("provider", ["local", "openrouter"])
async def test_a_200_that_is_not_json_is_retried_as_malformed(
    provider: str, emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = f"{provider}.chat.completions"
    options: dict[str, object] = {"retry": RetryPolicy(max_attempts=2, initial_delay_s=0.001)}
    if provider == "local":
        options["base_url"] = emu.base_url("local")
    else:
        monkeypatch.setenv("OPENROUTER_BASE_URL", emu.base_url("openrouter"))
        options["api_key"] = "sk-or-emulator-0123456789"
    config = Config(provider=provider, model="emulator-model", **options)  # type: ignore[arg-type]
    if provider == "openrouter":
        await pollux.check_ready(config)  # the catalog read is not what is tested
    emu.script(wire, MalformedBody(), Reply("ok"))
    answer = await pollux.run("Hi", config=config)
    assert answer.text == "ok"
    assert len(emu.requests_for(wire)) == 2
    emu.script(wire, MalformedBody(), MalformedBody())
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    assert (info.value.error_category, info.value.retryable) == ("malformed_response", True)


def test_every_key_a_live_config_holds_stays_scrubbed_past_256_tenants() -> None:
    configs = [
        Config(provider="openai", model="gpt-5-nano", api_key=f"tenant{i:04d}-plain-secret")
        for i in range(400)
    ]
    # Keys that look like nothing in particular (no sk-, AIza or Bearer shape).
    for i in (0, 1, 200, 399):
        assert scrub(f"echoed tenant{i:04d}-plain-secret") == f"echoed {REDACTED}"
    assert len(configs) == 400


def test_keys_in_sdk_and_httpcore_debug_records_are_scrubbed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from pollux._scrub import install_log_filter

    key = "tenant-echo-0123456789abcdef"
    Config(provider="openai", model="gpt-5-nano", api_key=key)  # registers the key
    config_alive = Config(provider="openai", model="gpt-5-nano", api_key=key)
    install_log_filter()
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("httpcore.http11").debug(
            "receive_response_headers.complete return_value=%r",
            (b"HTTP/1.1", 302, [(b"location", f"https://x/?token={key}".encode())]),
        )
        logging.getLogger("httpcore2.http11").debug("headers %r", [(b"x-echo", key.encode())])
        logging.getLogger("openai._base_client").debug("HTTP Response: headers %s", {"x": key})
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "receive_response_headers" in text and "HTTP Response" in text
    assert len(caplog.records) == 3
    assert key not in text
    assert config_alive.api_key == key


def test_an_emulator_without_a_catalog_accepts_none() -> None:
    with Emulator(models=None) as emu:
        assert emu.base_url("openai").startswith("http://127.0.0.1:")
    with pytest.raises(ValueError, match="list of model names"):
        Emulator(models="gpt-5-nano")  # type: ignore[arg-type]


def test_a_schema_nested_too_deep_or_with_an_endless_ref_is_a_configuration_error() -> None:
    # Called from sync code: pollux.run is awaited in a fresh loop.
    deep: dict[str, object] = {}
    for _ in range(300):
        deep = {"type": "array", "items": deep}
    config = Config(provider="openai", model="gpt-5-nano", use_mock=True)
    with pytest.raises(ConfigurationError, match="deeper than 100"):
        asyncio.run(pollux.run("Hi", output=deep, config=config))
    cycle = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    with pytest.raises(ConfigurationError, match=r"\$ref"):
        asyncio.run(pollux.run("Hi", output=cycle, config=config))


def test_a_base_url_that_does_not_parse_is_refused_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="not a valid URL"):
        Config(provider="local", base_url="http://[::1")
