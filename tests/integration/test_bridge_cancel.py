"""The bridge's early exits (a stream closed early, a cancelled fan-out) on a SQLite runtime.

Closing a `governed_stream` early or cancelling `governed_run_many` cancels steps whose store
I/O may be running in a worker thread; closing the runtime right after used to crash the
process (a closed SQLite connection under the thread) and leave reservations behind. Runs in a
subprocess so a crash cannot take the suite down.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import asyncio, random, sqlite3, sys
from pollard import AsyncRuntime, Budget
from pollard.adapters.pollux import governed_run_many, governed_stream
from pollux import Config, Environment, Input

random.seed(11)
MOCK = Config(provider="openai", model="gpt-5-nano", use_mock=True)

async def once(path, i):
    env = Environment(instructions="Be brief. " + "x" * 50_000)  # interned: slower store I/O
    async with AsyncRuntime(path) as rt:
        run = rt.run(f"s{i}", budget=Budget(steps=100))
        stream = governed_stream(run, env, Input(f"Tell me {i}"), config=MOCK)
        stop = random.randrange(3)
        seen = 0
        async for _event in stream:
            seen += 1
            if seen > stop:
                break
        await stream.aclose()
        many = asyncio.ensure_future(
            governed_run_many(run, [f"p{j}" for j in range(4)], config=MOCK)
        )
        await asyncio.sleep(random.random() * 0.01)
        many.cancel()
    await asyncio.gather(many, return_exceptions=True)
    conn = sqlite3.connect(path)
    left = conn.execute("SELECT count(*) FROM reservations").fetchone()[0]
    conn.close()
    assert left == 0, f"run {i}: {left} reservations left behind"

async def main(folder, n):
    for i in range(n):
        await once(f"{folder}/s{i}.db", i)
    print("ok")

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def test_closing_the_runtime_after_the_bridge_cancels_steps(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", _SCRIPT, str(tmp_path), "25"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    assert done.stdout.strip() == "ok"
    assert "never retrieved" not in done.stderr, done.stderr[-3000:]
