"""A pollux fan-out governed by pollard: budgeted per question, recorded, then replayed.

Five questions about one shared source go out through ``governed_run_many``: each question is its
own pollard step, checked against a ``Budget(steps=4)`` before its provider call (in question
order, while the calls overlap), so the last question is refused before anything is sent and the
other four are answered. Everything lands in a SQLite
ledger; a second runtime in replay mode then serves the same fan-out from the ledger without
calling the provider (its report shows nothing spent, everything avoided).

Offline: pollux's mock provider answers (deterministic placeholders, not a model's answers) and
the ledger lives in a temporary directory. Run it with ``python examples/governed_fanout.py``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from pollard import AsyncRuntime, Budget
from pollard.adapters.pollux import governed_run_many
from pollux import Config, OutputCollection, Source

SOURCE = Source.from_text(
    "Castor and Pollux are the twin brothers of Greek and Roman mythology, the Dioscuri. "
    "Pollux was immortal; when Castor died, the twins were turned into the constellation "
    "Gemini. Sailors took St. Elmo's fire as a sign of their presence.",
    identifier="dioscuri.txt",
)
QUESTIONS = [
    "Who were Castor and Pollux?",
    "Which of the twins was immortal?",
    "Which constellation did they become?",
    "What did sailors believe?",
    "In one sentence, what is this text about?",
]
CONFIG = Config(provider="openai", model="gpt-5-nano", use_mock=True)
BUDGET = Budget(steps=4)


async def fan_out(ledger: Path, mode: str) -> tuple[OutputCollection, dict[str, dict[str, str]]]:
    async with AsyncRuntime(ledger, mode=mode) as runtime:
        run = runtime.run("dioscuri-faq", budget=BUDGET)
        answers = await governed_run_many(
            run,
            QUESTIONS,
            sources=[SOURCE],
            instructions="Answer in one short sentence.",
            config=CONFIG,
        )
        return answers, run.report()


def summary(answers: OutputCollection) -> str:
    refused = sum(output.failed for output in answers.outputs)
    return f"{len(answers.outputs) - refused} answered, {refused} refused"


async def main() -> int:
    with tempfile.TemporaryDirectory() as directory:
        ledger = Path(directory) / "ledger.db"
        print(f"{len(QUESTIONS)} questions, Budget(steps={BUDGET.steps}); pollux mock provider")

        recorded, report = await fan_out(ledger, "record")
        print(f"\nrecord: {summary(recorded)}")
        for question, output in zip(QUESTIONS, recorded.outputs, strict=True):
            error = output.diagnostics.error
            answer = f"REFUSED ({error['message']})" if error else output.text
            print(f"  {question}\n    {answer}")
        print(f"  spent: {report['spent']}")

        replayed, report = await fan_out(ledger, "replay")
        # The recorded answers and refusals (a served Output's duration is the recorded step's).
        same = replayed.answers == recorded.answers and replayed.errors == recorded.errors
        print(f"\nreplay: {summary(replayed)}, the same as the recording: {same}")
        # report() lists every meter, at zero when nothing was charged to it
        spent = {name: amount for name, amount in report["spent"].items() if amount}
        print(f"  spent: {spent or 'nothing'}; avoided: {report['avoided']}")
    return 0 if same and not spent else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
