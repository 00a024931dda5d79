"""The main job: ask many questions about one shared source with a single ``run_many`` fan-out.

Offline by default: with no configuration it uses pollux's mock provider, which answers
deterministically without a network or a key (its answers are placeholders, not a model's).
Configure a real backend through the environment and the same code runs against it:

- ``POLLUX_LOCAL_BASE_URL=http://localhost:8080/v1``: any OpenAI-compatible server (llama.cpp,
  vLLM, Ollama, LM Studio), plus ``POLLUX_MODEL`` when the server needs a model name and
  ``POLLUX_LOCAL_API_KEY`` when it needs a key;
- ``OPENROUTER_API_KEY=...``: OpenRouter (model ``POLLUX_MODEL``, default ``openai/gpt-4o-mini``);
- ``OPENAI_API_KEY=...``: OpenAI (model ``POLLUX_MODEL``, default ``gpt-5-nano``).

``POLLUX_MODEL`` is the one model variable, the same one the ``pollux`` command reads.

Part 2 records the same fan-out through pollard (``pollard.adapters.pollux``) into a SQLite ledger,
each question a budgeted step, and replays it from the ledger without calling the provider. With a
real backend that records the questions once more (five more calls).

Pass ``--mock`` to force the offline run. Run it with ``make demo`` or
``python examples/quickstart.py``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

import pollux
from pollard import AsyncRuntime, Budget
from pollard.adapters.pollux import governed_run_many
from pollux import Config, OutputCollection, Source

DOCUMENT = """\
Castor and Pollux are the twin brothers of Greek and Roman mythology known together as the
Dioscuri. Pollux was the son of Zeus and immortal; Castor was the son of the mortal king
Tyndareus. When Castor was killed, Pollux asked Zeus to let him share his immortality with his
brother, and the twins were turned into the constellation Gemini. Sailors saw them as protectors
and took the electrical glow now called St. Elmo's fire as a sign of their presence. Pollux is
also the brightest star in Gemini, an orange giant about 34 light-years from the Sun.
"""

QUESTIONS = [
    "Who were the parents of Castor and Pollux?",
    "Why did the twins become a constellation?",
    "What did sailors believe about the twins?",
    "How far is the star Pollux from the Sun?",
    "In one sentence, what is this text about?",
]
SOURCE = Source.from_text(DOCUMENT, identifier="dioscuri.txt")
INSTRUCTIONS = "Answer in one short sentence, using only the source."


async def choose_config(force_mock: bool) -> tuple[Config, str]:
    """The backend to use, and an honest one-line description of it."""
    mock = Config(provider="openai", model="gpt-5-nano", use_mock=True)
    mock_note = "mock provider (offline; answers are deterministic placeholders, not a model's)"
    if force_mock:
        return mock, mock_note
    model = os.environ.get("POLLUX_MODEL") or None
    base_url = os.environ.get("POLLUX_LOCAL_BASE_URL")
    if base_url:
        local = Config(provider="local", base_url=base_url, model=model)
        status = await pollux.check_ready(local)
        if status.ready:
            unnamed = "" if model else "; set POLLUX_MODEL=NAME if the server needs a model name"
            return local, f"local server at {base_url} ({status.message}{unnamed})"
        print(f"Local server not ready: {status.message}\nFalling back to the mock provider.\n")
        return mock, mock_note
    if os.environ.get("OPENROUTER_API_KEY"):
        model = model or "openai/gpt-4o-mini"
        return Config(provider="openrouter", model=model), f"OpenRouter, model {model}"
    if os.environ.get("OPENAI_API_KEY"):
        model = model or "gpt-5-nano"
        return Config(provider="openai", model=model), f"OpenAI, model {model}"
    return mock, mock_note


async def main() -> int:
    config, backend = await choose_config(force_mock="--mock" in sys.argv[1:])
    print(f"pollux {pollux.__version__}: {len(QUESTIONS)} questions over one shared source")
    print(f"Backend: {backend}\n")

    results = await pollux.run_many(
        QUESTIONS, sources=[SOURCE], instructions=INSTRUCTIONS, config=config
    )

    for number, (question, output) in enumerate(
        zip(QUESTIONS, results.outputs, strict=True), start=1
    ):
        print(f"{number}. {question}")
        if output.failed:
            error = output.diagnostics.error or {}
            print(f"   FAILED: {error.get('message')}\n   hint: {error.get('hint')}")
        else:
            print(f"   {output.text.strip()}")
            print(
                f"   [{output.usage.input_tokens} in / {output.usage.output_tokens} out tokens,"
                f" {output.metrics.duration_s * 1000:.1f} ms, {output.metrics.completion_status}]"
            )

    usage = results.usage
    print(
        f"\nStatus: {results.status}. Total usage: {usage.input_tokens} input + "
        f"{usage.output_tokens} output = {usage.total_tokens} tokens"
        + (" (estimated by the mock at 4 characters per token)." if config.use_mock else ".")
    )
    replayed_same = await governed(config)
    return 0 if results.status != "error" and replayed_same else 1


async def governed(config: Config) -> bool:
    """Part 2: the same fan-out through pollard, recorded into a SQLite ledger, then replayed."""
    budget = Budget(steps=len(QUESTIONS))
    print(f"\nGoverned by pollard: one budgeted step per question, Budget(steps={budget.steps})")
    with tempfile.TemporaryDirectory() as directory:
        ledger = Path(directory) / "ledger.db"
        recorded, report = await governed_fan_out(ledger, "record", config, budget)
        spent = report["spent"]
        print(f"  record: {spent.get('steps', '0')} model calls, {spent.get('tokens', '0')} tokens")
        if recorded.status != "ok":  # failed calls are not recordings: replay would miss them
            print(f"  replay skipped: the recording is {recorded.status} (hybrid mode would retry)")
            return recorded.status != "error"
        replayed, report = await governed_fan_out(ledger, "replay", config, budget)
    same = replayed.answers == recorded.answers
    # report() lists every meter, at zero when nothing was charged to it
    spent = {name: amount for name, amount in report["spent"].items() if amount}
    print(
        f"  replay: spent {spent or 'nothing'} (no provider call), "
        f"{report['avoided'].get('steps', '0')} steps served from the ledger; same answers: {same}"
    )
    return same and not spent


async def governed_fan_out(
    ledger: Path, mode: str, config: Config, budget: Budget
) -> tuple[OutputCollection, dict[str, dict[str, str]]]:
    async with AsyncRuntime(ledger, mode=mode) as runtime:
        run = runtime.run("quickstart", budget=budget)
        answers = await governed_run_many(
            run, QUESTIONS, sources=[SOURCE], instructions=INSTRUCTIONS, config=config
        )
        return answers, run.report()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
