"""``done.output`` equals ``interact``'s Output for the same exchange, retries included."""

from __future__ import annotations

import dataclasses

import pollux
from pollux import Config, Environment, Input, Output
from pollux.testing import Emulator, ErrorResponse, Reply


def _comparable(output: Output) -> Output:
    # Only the measured duration and the emulator's per-request response id may differ.
    output.diagnostics.raw["response"].pop("response_id", None)
    return dataclasses.replace(output, metrics=dataclasses.replace(output.metrics, duration_s=0.0))


async def test_a_retried_stream_reports_its_attempts_like_interact(
    emu: Emulator, local_config: Config
) -> None:
    emu.script("local", ErrorResponse(503), Reply("same"), ErrorResponse(503), Reply("same"))
    expected = await pollux.interact(Environment(), Input("q"), config=local_config)
    events = [e async for e in pollux.stream(Environment(), Input("q"), config=local_config)]
    done = events[-1].output
    assert done is not None
    assert done.diagnostics.raw["attempts"] == expected.diagnostics.raw["attempts"] == 2
    assert _comparable(done) == _comparable(expected)
