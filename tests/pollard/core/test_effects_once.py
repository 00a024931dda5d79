"""Issue 25: a tool step records its intent before the tool runs, and its effect runs once.

The tool gets a stable idempotency key (its node id, `pollard.idempotency_key()`); a completed
effect is served from the ledger on the next call; one in flight when its process died is
`EffectAmbiguous`, never silently run again (a deliberate repeat takes another attempt).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import pollard
from pollard import EffectAmbiguous, PollardError, Runtime


def test_the_tool_gets_a_stable_key_and_a_completed_effect_is_served(tmp_path: Path) -> None:
    db = tmp_path / "effects.db"
    keys: list[str] = []

    def send(payload: Any) -> dict[str, Any]:  # the step's payload: {"tool", "args"}
        keys.append(pollard.idempotency_key())
        return {"sent": payload["args"]["to"]}

    with Runtime(db) as rt:
        node = rt.run("mail").tool_call("send", {"to": "a"}, fn=send)
    assert keys == [node.id]
    with Runtime(db) as rt:  # a resume: the same step is served, the mail is not sent again
        again = rt.run("mail").tool_call("send", {"to": "a"}, fn=send)
        assert again.id == node.id and keys == [node.id]
        other = rt.run("mail").tool_call("send", {"to": "a"}, fn=send, attempt=1)
    assert keys == [node.id, other.id]  # a deliberate repeat is another effect, another key
    with pytest.raises(PollardError, match="outside a tool step"):
        pollard.idempotency_key()


def test_a_failed_effect_is_recorded_and_may_be_retried(tmp_path: Path) -> None:
    calls: list[str] = []

    def flaky(args: Any) -> dict[str, Any]:
        calls.append(pollard.idempotency_key())
        if len(calls) == 1:
            raise ConnectionError("refused")
        return {"ok": True}

    with Runtime(tmp_path / "retry.db") as rt:
        run = rt.run("retry")
        with pytest.raises(ConnectionError):
            run.tool_call("charge", {"cents": 5}, fn=flaky)
        node = run.tool_call("charge", {"cents": 5}, fn=flaky)  # not ambiguous: it failed
    assert calls == [node.id, node.id]  # the retry carries the same key


def test_an_effect_in_flight_at_a_crash_is_ambiguous_not_run_again(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    crash = textwrap.dedent(
        f"""
        import os
        from pollard import Runtime
        rt = Runtime({str(db)!r}, reservation_lease_seconds=0.2)
        def send(args):
            os._exit(9)  # the process dies inside the tool: did the mail go out?
        rt.run("mail").tool_call("send", {{"to": "a"}}, fn=send)
        """
    )
    done = subprocess.run([sys.executable, "-c", crash], check=False)
    assert done.returncode == 9
    time.sleep(0.3)  # the crashed writer's lease ends (until then it holds the run: one writer)
    ran: list[str] = []

    def send(args: Any) -> dict[str, Any]:
        ran.append(pollard.idempotency_key())
        return {"sent": True}

    with Runtime(db) as rt:
        run = rt.run("mail")
        with pytest.raises(EffectAmbiguous, match="in flight") as info:
            run.tool_call("send", {"to": "a"}, fn=send)
        assert ran == [] and info.value.intent_id == f"effect:{info.value.node_id}:0"
        assert "attempt=" in (info.value.hint or "")
        with pytest.raises(EffectAmbiguous):  # still ambiguous: never silently re-run
            run.tool_call("send", {"to": "a"}, fn=send)
        node = run.tool_call("send", {"to": "a"}, fn=send, attempt=1)  # a deliberate repeat
    assert ran == [node.id] != [info.value.node_id]


def test_a_cancelled_effect_is_ambiguous_not_retried(tmp_path: Path) -> None:
    import asyncio

    from pollard import AsyncRuntime

    ran: list[str] = []

    async def main() -> None:
        async with AsyncRuntime(tmp_path / "cancel.db") as rt:
            run = rt.run("pay")
            started = asyncio.Event()

            async def pay(args: Any) -> dict[str, Any]:
                ran.append(pollard.idempotency_key())
                started.set()
                await asyncio.Event().wait()  # cancelled here: was the payment sent?
                return {"paid": True}

            task = asyncio.ensure_future(run.tool_call("pay", {"cents": 5}, fn=pay))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            with pytest.raises(EffectAmbiguous):
                await rt.run("pay").tool_call("pay", {"cents": 5}, fn=pay)

    asyncio.run(main())
    assert len(ran) == 1
