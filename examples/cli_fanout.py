"""The main job from the shell: the `pollux` command fans out, governed into a SQLite ledger.

Runs these commands (the ones in the README and docs/pollux/cli.md) in a temporary folder with
the bundled source and questions (examples/data/), offline on the mock provider:

    pollux many questions.txt --source dioscuri.txt --mock \\
        --ledger runs.db --max-calls 10 --max-usd 0.01 --out answers.jsonl
    pollux many questions.txt --source dioscuri.txt --mock \\
        --ledger runs.db --max-calls 10 --max-usd 0.01 --out answers.jsonl   # resume: all done
    pollard report runs.db "pollux many questions.txt"
    pollux many questions.txt --source dioscuri.txt --mock \\
        --ledger runs.db --replay --out replayed.jsonl

The first command answers the five questions (one budgeted pollard step each) and prints the
cost report; the second finds every answer in answers.jsonl and calls nothing; the replay
serves all five from the ledger with zero provider calls ("spent nothing"). Run it with
``make demo`` or ``python examples/cli_fanout.py``.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).parent / "data"
BIN = Path(sys.executable).parent
FAN_OUT = ["many", "questions.txt", "--source", "dioscuri.txt", "--mock"]
RECORD = [*FAN_OUT, "--ledger", "runs.db", "--max-calls", "10", "--max-usd", "0.01"]
REPLAY = [*FAN_OUT, "--ledger", "runs.db", "--replay"]


def run(program: str, *args: str, cwd: Path) -> int:
    """Print the command as typed, run it, and show what it printed."""
    print(f"$ {program} {shlex.join(args)}")
    done = subprocess.run(
        [str(BIN / program), *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    for line in (done.stdout + done.stderr).splitlines():
        print(f"  {line}")
    print(f"  (exit {done.returncode})\n")
    return done.returncode


def answers(path: Path) -> dict[int, str]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return {record["index"]: record["text"] for record in records}


def main() -> int:
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        for name in ("questions.txt", "dioscuri.txt"):
            shutil.copy(DATA / name, work / name)
        codes = [
            run("pollux", *RECORD, "--out", "answers.jsonl", cwd=work),
            run("pollux", *RECORD, "--out", "answers.jsonl", cwd=work),
            run("pollard", "report", "runs.db", "pollux many questions.txt", cwd=work),
            run("pollux", *REPLAY, "--out", "replayed.jsonl", cwd=work),
        ]
        recorded, replayed = answers(work / "answers.jsonl"), answers(work / "replayed.jsonl")
    same = recorded == replayed
    print(f"The replay gave the same {len(recorded)} answers without a provider call: {same}")
    return 0 if same and codes == [0, 0, 0, 0] else 1


if __name__ == "__main__":
    sys.exit(main())
