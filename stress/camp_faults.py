"""Fault-injection fan-out on the pollux emulator (public API only).

A handler answers each request with a fault (503, 429, 500, a dropped connection) with
probability 1/4, otherwise with a reply naming its prompt. ``run_many`` must keep every answer
that could succeed (a prompt that got a reply on some attempt is answered, with its own text)
and report the others as failed outputs, never raise or mix answers up.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import pollux
from pollux import Config, RetryPolicy
from pollux.testing import DropConnection, Emulator, ErrorResponse, Reply
from stress._report import Deadline, Outcome

PROMPTS = 300
FAULT_RATE = 0.25
ATTEMPTS = 4


def _round(seed: int, outcome: Outcome) -> tuple[int, int]:
    rng = random.Random(seed)
    lock = threading.Lock()
    served: dict[str, list[bool]] = {}

    def handler(request: Any) -> Any:
        prompt = request.json["messages"][-1]["content"]
        if isinstance(prompt, list):
            prompt = " ".join(part.get("text", "") for part in prompt if isinstance(part, dict))
        with lock:
            fault = rng.random() < FAULT_RATE
            served.setdefault(prompt, []).append(not fault)
            kind = rng.randrange(4)
        if not fault:
            return Reply(f"answer to {prompt}")
        if kind == 0:
            return ErrorResponse(503, headers={"retry-after-ms": "1"})
        if kind == 1:
            return ErrorResponse(429, headers={"retry-after-ms": "1"})
        if kind == 2:
            return ErrorResponse(500)
        return DropConnection()

    prompts = [f"question {seed}-{i}" for i in range(PROMPTS)]
    with Emulator() as emu:
        emu.on("local.chat", handler)
        config = Config(
            provider="local",
            model="m",
            base_url=emu.base_url("local"),
            request_concurrency=32,
            retry=RetryPolicy(
                max_attempts=ATTEMPTS, initial_delay_s=0.001, max_delay_s=0.01, jitter=False
            ),
        )
        result = asyncio.run(pollux.run_many(prompts, config=config))
    answered = failed = 0
    for prompt, output in zip(prompts, result.outputs, strict=True):
        could = any(served.get(prompt, []))
        if output.failed:
            failed += 1
            if could:
                outcome.fail(f"{prompt!r} got a reply but its output failed")
        else:
            answered += 1
            if output.text != f"answer to {prompt}":
                outcome.fail(f"{prompt!r} answered {output.text[:40]!r}")
            if not could:
                outcome.fail(f"{prompt!r} answered without a reply from the server")
    return answered, failed


def run(scale: float) -> list[Outcome]:
    outcome = Outcome(
        "faults fan-out",
        f"{PROMPTS}-prompt run_many under {FAULT_RATE:.0%} faults keeps every answer that could "
        "succeed",
        cap=max(1, int(5 * scale)),
    )
    started = time.monotonic()
    answered = failed = 0
    deadline = Deadline(90 * scale, outcome.cap)
    while deadline.more():
        try:
            a, f = _round(outcome.trials, outcome)
        except Exception as exc:  # run_many must report failures as outputs, never raise
            outcome.fail(f"run_many raised {type(exc).__name__}: {exc}")
            a = f = 0
        answered += a
        failed += f
        outcome.trials += 1
    outcome.seconds = time.monotonic() - started
    outcome.figure = (
        f"{outcome.trials}x{PROMPTS} prompts: {answered} answered, {failed} failed after "
        f"{ATTEMPTS} faulted attempts, {outcome.failures} wrong"
    )
    return [outcome]
