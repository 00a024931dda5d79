"""The `pollux` command: what `pollux many` costs, side by side with `pollux.run_many` in-process.

The workload of ``bench_pollux_fanout``: 300 prompts over one shared 20 KB text source,
``provider="local"``, concurrency 32, against the canned Chat Completions server in its own
process answering after 50 ms. Measured in one run, best of three each:

1. ``pollux.run_many`` in this process (a fresh event loop, imports already done): the baseline.
   Beside it, the command's own fan-out (``pollux._cli.fanout.fan_out``: one call per prompt,
   32 workers, every record written and flushed as it arrives) in this process too, so the
   ratio isolates the engine from process start-up.
2. ``pollux --version``: the command's start-up (interpreter and imports), on its own.
3. ``pollux many PROMPTS --source SRC --out FILE --concurrency 32``: wall time of the whole
   process (start-up, imports, the fan-out, closing), as a ratio to the baseline.
4. The same with ``--ledger runs.db`` (each prompt a governed pollard step in SQLite).
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._fanout import SOURCE_TEXT, canned_server, questions
from bench._result import Result
from bench.bench_pollux_fanout import CONCURRENCY, LATENCY_S, MODEL, N_PROMPTS

POLLUX = Path(sys.executable).with_name("pollux")
REPEATS = 3


def _in_process(base_url: str) -> float:
    import pollux

    config = pollux.Config(
        provider="local", model=MODEL, base_url=base_url, request_concurrency=CONCURRENCY
    )
    source = pollux.Source.from_text(SOURCE_TEXT)

    async def work() -> None:
        results = await pollux.run_many(questions(N_PROMPTS), sources=[source], config=config)
        assert results.status == "ok", results.status

    asyncio.run(work())  # warm-up
    best = math.inf
    for _ in range(REPEATS):
        start = time.perf_counter()
        asyncio.run(work())
        best = min(best, time.perf_counter() - start)
    return best


def _cli_engine(base_url: str, directory: Path) -> float:
    import contextlib
    import io

    import pollux
    from pollux._cli.fanout import fan_out
    from pollux._cli.records import RecordSink

    config = pollux.Config(
        provider="local", model=MODEL, base_url=base_url, request_concurrency=CONCURRENCY
    )
    source = pollux.Source.from_text(SOURCE_TEXT)
    prompts = questions(N_PROMPTS)

    def once() -> float:
        sink = RecordSink(directory / "engine.jsonl", append=False)
        start = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()):  # the plain progress lines
            code = asyncio.run(
                fan_out(
                    prompts,
                    list(range(len(prompts))),
                    sources=[source],
                    instructions=None,
                    schema=None,
                    config=config,
                    ledger=None,
                    sink=sink,
                    skipped=0,
                )
            )
        elapsed = time.perf_counter() - start
        sink.close()
        assert code == 0
        return elapsed

    once()  # warm-up
    return min(once() for _ in range(REPEATS))


def _command(*args: str, cwd: Path) -> float:
    best = math.inf
    for _ in range(REPEATS):
        for stale in cwd.glob("out*"):
            stale.unlink()
        for stale in cwd.glob("runs.db*"):
            stale.unlink()
        start = time.perf_counter()
        done = subprocess.run([str(POLLUX), *args], cwd=cwd, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        assert done.returncode == 0, done.stderr
        best = min(best, elapsed)
    return best


def run() -> list[Result]:
    with (
        tempfile.TemporaryDirectory() as directory,
        canned_server(LATENCY_S, path="/v1") as base_url,
    ):
        work = Path(directory)
        (work / "q.txt").write_text("\n".join(questions(N_PROMPTS)) + "\n")
        (work / "src.txt").write_text(SOURCE_TEXT)
        fan = ["many", "q.txt", "--source", "src.txt", "--out", "out.jsonl"]
        local = ["--provider", "local", "--model", MODEL, "--base-url", base_url]
        options = [*local, "--concurrency", str(CONCURRENCY)]
        baseline = _in_process(base_url)
        engine = _cli_engine(base_url, work)
        startup = _command("--version", cwd=work)
        plain = _command(*fan, *options, cwd=work)
        governed = _command(*fan, *options, "--ledger", "runs.db", cwd=work)
    note = f"{N_PROMPTS} prompts, C={CONCURRENCY}, {LATENCY_S * 1000:.0f} ms server"
    return [
        Result("cli: pollux.run_many in-process (baseline)", baseline, "s", direction="lower"),
        Result(
            "cli: the command's fan-out in-process / run_many",
            engine / baseline,
            "x",
            direction="lower",
            note="one call per prompt, records flushed as they arrive",
        ),
        Result("cli: pollux --version (start-up)", startup, "s", direction="lower"),
        Result(
            "cli: pollux many / in-process run_many",
            plain / baseline,
            "x",
            direction="lower",
            note=note,
        ),
        Result(
            "cli: pollux many --ledger / in-process run_many",
            governed / baseline,
            "x",
            direction="lower",
            note="SQLite ledger, one governed step per prompt",
        ),
    ]
