"""All five wires under faults: ``run_many`` through each provider's real client (the SDKs for
OpenAI, Anthropic and Gemini, pollux's own transport for local and OpenRouter) against the
emulator.

A handler answers each generation request with a fault (503, 429, 500, a dropped connection, or
a 200 whose body is not JSON) with probability 1/4, otherwise with a reply naming its prompt.
Every answer that could succeed must be kept, with its own text; the others are failed outputs
with an error category (never ``None``), and nothing raises. Each wire's first call runs under
``RetryPolicy.max_elapsed_s`` (the SDK is imported before it starts).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import threading
import time
from typing import Any

import pollux
from pollux import Config, RetryPolicy
from pollux.testing import DropConnection, Emulator, ErrorResponse, MalformedBody, Reply
from stress._report import Deadline, Outcome

PROMPTS = 120
FAULT_RATE = 0.25
ATTEMPTS = 4

#: provider -> (model, base-URL variable or None for base_url, handler selector)
WIRES = {
    "local": ("m", None, "local.chat"),
    "openrouter": ("emulator-model", "OPENROUTER_BASE_URL", "openrouter.chat"),
    "openai": ("gpt-5-nano", "OPENAI_BASE_URL", "openai.responses"),
    "anthropic": ("claude-haiku-4-5", "ANTHROPIC_BASE_URL", "anthropic.messages"),
    "gemini": ("gemini-2.5-flash", "GOOGLE_GEMINI_BASE_URL", "gemini"),
}
_MARK = re.compile(r"question \d+-\d+-\d+")


def _round(provider: str, seed: int, outcome: Outcome) -> tuple[int, int, int, int]:
    model, env_var, selector = WIRES[provider]
    rng = random.Random(seed)
    lock = threading.Lock()
    served: dict[str, list[bool]] = {}

    def handler(request: Any) -> Any:
        found = _MARK.search(request.body.decode("utf-8", "replace"))
        if found is None:  # not a generation request (a catalog read): the default model
            return None
        prompt = found.group(0)
        with lock:
            fault = rng.random() < FAULT_RATE
            served.setdefault(prompt, []).append(not fault)
            kind = rng.randrange(5)
        if not fault:
            return Reply(f"answer to {prompt}")
        return [
            ErrorResponse(503, headers={"retry-after-ms": "1"}),
            ErrorResponse(429, headers={"retry-after-ms": "1"}),
            ErrorResponse(500),
            DropConnection(),
            MalformedBody(),
        ][kind]

    prompts = [f"question {seed}-{i}-{len(provider)}" for i in range(PROMPTS)]
    with Emulator() as emu:
        emu.on(selector, handler)
        options: dict[str, Any] = {
            "request_concurrency": 16,
            "retry": RetryPolicy(
                max_attempts=ATTEMPTS,
                initial_delay_s=0.001,
                max_delay_s=0.01,
                jitter=False,
                max_elapsed_s=120,
            ),
        }
        if env_var is None:
            options["base_url"] = emu.base_url(provider)
        else:
            os.environ[env_var] = emu.base_url(provider)
            options["api_key"] = "stress-wire-key-0123456789"
        config = Config(provider=provider, model=model, **options)  # type: ignore[arg-type]
        result = asyncio.run(pollux.run_many(prompts, config=config))
    answered = failed = 0
    for prompt, output in zip(prompts, result.outputs, strict=True):
        could = any(served.get(prompt, []))
        if output.failed:
            failed += 1
            error = output.diagnostics.error or {}
            if could:
                outcome.fail(f"{provider}: {prompt!r} got a reply but failed: {error}")
            if error.get("error_category") is None and "category" not in json.dumps(error):
                outcome.fail(f"{provider}: {prompt!r} failed without a category: {error}")
        else:
            answered += 1
            if output.text != f"answer to {prompt}":
                outcome.fail(f"{provider}: {prompt!r} answered {output.text[:40]!r}")
    requests = sum(len(tries) for tries in served.values())
    faults = sum(tries.count(False) for tries in served.values())
    if not faults:
        outcome.fail(f"{provider}: no fault was injected ({requests} requests seen)")
    return answered, failed, requests, faults


def run(scale: float) -> list[Outcome]:
    outcomes = []
    rounds = max(1, int(3 * scale))
    for provider in WIRES:
        outcome = Outcome(
            f"faults on {provider}",
            f"{PROMPTS}-prompt run_many on the {provider} wire under {FAULT_RATE:.0%} faults "
            "(incl. 200s that are not JSON) keeps every answer that could succeed",
            cap=rounds,
        )
        started = time.monotonic()
        answered = failed = requests = faults = 0
        deadline = Deadline(60 * scale, rounds)
        while deadline.more():
            try:
                a, f, r, x = _round(provider, outcome.trials, outcome)
            except Exception as exc:  # run_many reports failures as outputs, never raises
                outcome.fail(f"{provider}: run_many raised {type(exc).__name__}: {exc}")
                a = f = r = x = 0
            answered += a
            failed += f
            requests += r
            faults += x
            outcome.trials += 1
        outcome.seconds = time.monotonic() - started
        outcome.figure = (
            f"{outcome.trials}x{PROMPTS} prompts, {requests} requests ({faults} faulted): "
            f"{answered} answered, {failed} failed after {ATTEMPTS} faulted attempts, "
            f"{outcome.failures} wrong"
        )
        outcomes.append(outcome)
    return outcomes
