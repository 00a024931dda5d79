"""Secret greps: a configured API key never appears in messages, JSON, logs or ledger bytes.

An OpenAI-compatible server that echoes the key in its error body ("Incorrect API key provided:
sk-...", as real servers and proxies do) answers some calls; others succeed. Every sink a user
or operator sees is searched for the key (and its bearer header form): exception text and hints,
``Output``/``OutputCollection`` JSON, every log record pollux and pollard emit at DEBUG, and the
bytes of a SQLite ledger the same fan-out was recorded into through ``pollard.adapters.pollux``.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import pollux
from pollard import AsyncRuntime, Budget
from pollard.adapters.pollux import governed_run_many
from pollux import Config, RetryPolicy
from pollux.testing import Emulator, ErrorResponse, Reply
from stress._report import Deadline, Outcome


def _sinks(key: str, tmp: Path, rounds: int, deadline: Deadline) -> dict[str, bytes]:
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    handler.setLevel(logging.DEBUG)
    logging.getLogger().addHandler(handler)
    previous = logging.getLogger().level
    logging.getLogger().setLevel(logging.DEBUG)
    found: dict[str, list[str]] = {"messages": [], "json": []}
    ledger = tmp / "ledger.db"
    try:
        with Emulator() as emu:
            calls = {"n": 0}

            def handler_fn(request: Any) -> Any:
                calls["n"] += 1
                if calls["n"] % 3 == 0:
                    return ErrorResponse(401, message=f"Incorrect API key provided: {key}.")
                if calls["n"] % 3 == 1:
                    return ErrorResponse(400, message=f"Bad request for Bearer {key}")
                return Reply("fine")

            emu.on("local.chat", handler_fn)
            config = Config(
                provider="local",
                model="m",
                base_url=emu.base_url("local"),
                api_key=key,
                retry=RetryPolicy(max_attempts=1),
            )
            prompts = [f"question {i}?" for i in range(12)]
            while deadline.more():
                result = asyncio.run(pollux.run_many(prompts, config=config))
                found["json"].append(json.dumps(result.to_jsonable()))
                for output in result.outputs:
                    found["json"].append(json.dumps(output.to_jsonable()))
                try:
                    asyncio.run(pollux.run("one more", config=config))
                except pollux.PolluxError as exc:
                    found["messages"].append(f"{exc} {getattr(exc, 'hint', '')} {exc!r}")

                async def governed() -> None:
                    async with AsyncRuntime(ledger) as runtime:
                        run = runtime.run("secrets", budget=Budget(steps=10_000))
                        answers = await governed_run_many(run, prompts, config=config)
                        found["json"].append(json.dumps(answers.to_jsonable()))

                try:
                    asyncio.run(governed())
                except Exception as exc:
                    found["messages"].append(f"{exc} {getattr(exc, 'hint', '')} {exc!r}")
                rounds -= 1
                if rounds <= 0:
                    break
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(previous)
    ledger_bytes = b"".join(p.read_bytes() for p in tmp.iterdir() if p.name.startswith("ledger.db"))
    return {
        "messages and hints": "\n".join(found["messages"]).encode(),
        "output JSON": "\n".join(found["json"]).encode(),
        "log records": log.getvalue().encode(),
        "sqlite ledger bytes": ledger_bytes,
    }


def run(scale: float) -> list[Outcome]:
    key = "sk-stress-" + secrets.token_hex(16)
    started = time.monotonic()
    rounds = max(1, int(5 * scale))
    deadline = Deadline(60 * scale, rounds)
    with tempfile.TemporaryDirectory() as tmp:
        sinks = _sinks(key, Path(tmp), rounds, deadline)
    outcomes = []
    for sink, data in sinks.items():
        outcome = Outcome(f"secret grep: {sink}", "the configured API key never appears", cap=1)
        outcome.trials = 1
        hits = data.count(key.encode())
        if hits:
            outcome.fail(f"the API key appears {hits} time(s) in {len(data)} bytes")
        outcome.figure = f"{hits} occurrence(s) of the key in {len(data):,} bytes"
        outcome.seconds = time.monotonic() - started
        outcomes.append(outcome)
    return outcomes
