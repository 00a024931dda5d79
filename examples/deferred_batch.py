"""Submit a fan-out as an OpenAI Batch job, persist the handle, and collect it "later".

Offline by default: the official SDK is pointed at the pollux.testing emulator, whose virtual
batch clock stands in for the hours a real batch takes, and one request is scripted to fail so
the partial result is visible. With ``OPENAI_API_KEY`` set and ``POLLUX_REAL_BATCH=1`` it submits
a real job instead and only prints the handle (collect it later with the same script and
``POLLUX_COLLECT=<path to the handle>``). Run it with ``python examples/deferred_batch.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path

from pollux import (
    Config,
    DeferredHandle,
    DeferredNotReadyError,
    Source,
    collect_deferred,
    defer,
    inspect_deferred,
)
from pollux.testing import Emulator, ErrorResponse, Reply

REPORT = Source.from_text(
    "Q3: revenue +12%, churn down to 3.1%. Two suppliers are eight weeks late; the new plant "
    "opens in May if permits arrive."
)
PROMPTS = [
    "Summarize the report in one sentence.",
    "What is the biggest execution risk?",
    "What should the board ask about next quarter?",
]


async def submit(config: Config, job_path: Path) -> DeferredHandle:
    handle = await defer(PROMPTS, sources=[REPORT], instructions="Be brief.", config=config)
    job_path.write_text(json.dumps(handle.to_dict(), indent=2))
    print(f"submitted {handle.job_id} ({handle.request_count} requests) -> {job_path}")
    return handle


async def collect(job_path: Path) -> bool:
    """One polling step: True once the results were printed."""
    handle = DeferredHandle.from_dict(json.loads(job_path.read_text()))
    snapshot = await inspect_deferred(handle)
    print(
        f"status={snapshot.status} ({snapshot.provider_status}) "
        f"succeeded={snapshot.succeeded} failed={snapshot.failed} pending={snapshot.pending}"
    )
    if not snapshot.is_terminal:
        return False
    result = await collect_deferred(handle)
    print(f"collection status: {result.status}")
    for prompt, output in zip(PROMPTS, result.outputs, strict=True):
        provenance = output.diagnostics.raw["deferred"]
        error = output.diagnostics.error or {}
        answer = output.text if not output.failed else f"(failed: {error.get('message')})"
        print(f"- [{provenance['request_id']}] {prompt}\n    {answer}")
    return True


async def offline() -> None:
    with Emulator() as emu, tempfile.TemporaryDirectory() as tmp:
        os.environ["OPENAI_BASE_URL"] = emu.base_url("openai")
        os.environ["OPENAI_API_KEY"] = "sk-emulator"  # lifecycle calls read the usual variable
        emu.script(
            "openai.responses",
            Reply("Growth is strong, but supplier delays threaten the May plant opening."),
            ErrorResponse(500, message="The model crashed on this one."),
            Reply("Ask whether the permits and the late suppliers are on a recovery plan."),
        )
        job_path = Path(tmp) / "job.json"
        config = Config(provider="openai", model="gpt-5-nano")
        handle = await submit(config, job_path)
        try:
            await collect_deferred(handle)
        except DeferredNotReadyError as exc:
            print(f"too early to collect: the job is {exc.snapshot.status}")
        for hours in (0, 0.002, 1):  # what a scheduler would do over a day
            emu.advance(hours * 3600)
            if await collect(job_path):
                break


async def real(job_path: Path) -> None:
    model = os.environ.get("OPENAI_MODEL", "gpt-5-nano")
    if os.environ.get("POLLUX_COLLECT"):
        await collect(Path(os.environ["POLLUX_COLLECT"]))
    else:
        await submit(Config(provider="openai", model=model), job_path)


if __name__ == "__main__":
    if os.environ.get("OPENAI_API_KEY") and os.environ.get("POLLUX_REAL_BATCH") == "1":
        asyncio.run(real(Path("deferred-job.json")))
    else:
        asyncio.run(offline())
