"""Secrets under many tenants: every key a live ``Config`` holds stays scrubbed, past 256.

One process holds 600 tenants' configs, each with its own key shaped like nothing in
particular (no ``sk-``, ``AIza`` or ``Bearer`` form the patterns would catch). A server echoes
the caller's key in its error body, in a response header and in a ``Location``; calls are made
for the oldest tenants first (those a first-in-first-out registry of 256 forgot) on the OpenAI,
Anthropic (a file upload, through the SDK's httpx) and local wires. Every sink is searched for
every key: error text and hints, ``Output`` JSON, and DEBUG records of every logger (pollux,
the SDKs, httpx, httpcore).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import pollux
from pollux import Config, RetryPolicy, Source
from pollux.testing import Emulator, ErrorResponse, Reply
from stress._report import Outcome

TENANTS = 600


def _echo(request: Any) -> Any:
    key = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    key = key or request.headers.get("x-api-key", "")
    if not key:
        return None
    if hash(key) % 3 == 0:
        return Reply("fine")
    return ErrorResponse(
        401,
        message=f"Incorrect API key provided: {key}.",
        headers={"x-echo-key": key, "location": f"https://login.example/?k={key}"},
    )


def run(scale: float) -> list[Outcome]:
    started = time.monotonic()
    tenants = max(300, int(TENANTS * scale))
    keys = [f"tenant{i:04d}.{secrets.token_hex(12)}" for i in range(tenants)]
    folder = tempfile.TemporaryDirectory()
    doc = Path(folder.name) / "doc.txt"
    doc.write_text("Castor and Pollux. " * 500)
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    texts: list[str] = []
    calls = 0
    try:
        with Emulator() as emu:
            for wire in ("openai", "local", "anthropic"):
                emu.on(wire, _echo)
            os.environ["OPENAI_BASE_URL"] = emu.base_url("openai")
            os.environ["ANTHROPIC_BASE_URL"] = emu.base_url("anthropic")
            once = RetryPolicy(max_attempts=1)
            configs = []
            for i, key in enumerate(keys):
                if i % 3 == 0:
                    configs.append(Config(provider="openai", model="gpt-5-nano", api_key=key,
                                          retry=once))  # fmt: skip
                elif i % 3 == 1:
                    # A file source: the upload goes through the SDK (httpx2, httpcore2).
                    configs.append(Config(provider="anthropic", model="claude-haiku-4-5",
                                          api_key=key, retry=once))  # fmt: skip
                else:
                    configs.append(Config(provider="local", model="m", api_key=key,
                                          base_url=emu.base_url("local"), retry=once))  # fmt: skip
            # The oldest tenants first, then a sample of the rest.
            chosen = list(range(min(60, tenants))) + list(range(60, tenants, max(1, tenants // 40)))

            async def calls_of(config: Config) -> None:
                result = await pollux.run_many(["q1", "q2"], config=config)
                texts.append(json.dumps(result.to_jsonable()))
                sources = [Source.from_file(doc)] if config.provider == "anthropic" else []
                try:
                    await pollux.run("one", sources=sources, config=config)
                except pollux.PolluxError as exc:
                    texts.append(f"{exc} | {exc.hint} | {exc!r}")

            async def all_calls() -> None:
                for index in chosen:
                    await calls_of(configs[index])

            asyncio.run(all_calls())
            calls = len(chosen) * 3
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
        folder.cleanup()
    records = log.getvalue()
    sinks = {"messages and output JSON": "\n".join(texts), "DEBUG log records": records}
    outcomes = []
    for sink, text in sinks.items():
        outcome = Outcome(
            f"tenant keys: {sink}",
            f"none of {tenants} live tenants' keys appears (more than the old 256-key registry)",
            cap=1,
        )
        outcome.trials = 1
        hits = sum(text.count(key) for key in keys)
        if hits:
            outcome.fail(f"{hits} key occurrence(s) in {len(text):,} characters")
        debug = sink.startswith("DEBUG")
        lines = f"{len(records.splitlines()):,} records" if debug else f"{len(texts)} texts"
        outcome.figure = (
            f"{calls} calls by {len(chosen)} of {tenants} tenants: {hits} key occurrence(s) in "
            f"{len(text):,} characters ({lines})"
        )
        outcome.seconds = time.monotonic() - started
        outcomes.append(outcome)
    return outcomes


if __name__ == "__main__":
    import sys

    for o in run(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0):
        print(o.name, o.verdict, o.figure, o.notes)
