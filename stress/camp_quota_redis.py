"""A shared quota on Redis whose server restarts empty mid-run (no persistence).

Eight worker processes pace governed fan-outs through one Redis window (the fleet of
`stress.camp_quota`). Just after the second window's worth reaches the provider, the campaign's
own `redis-server` (never the machine's shared one) is stopped and started again with nothing
on disk, so the window forgets what the fleet drew from it, which the emulator (the provider)
still counts. The figures: 429s (the goal is 0), the most requests that reached the provider
inside any window (never above the quota by more than one request), every prompt answered, no
traceback. Before a window had an epoch, the fleet was admitted a second window's worth right
after the restart.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
from typing import Any

from stress import camp_quota
from stress._redisserver import PrivateRedis
from stress._report import Deadline, Outcome


def _restart_when_warm(server: PrivateRedis, restarted: list[float], emu: Any) -> None:
    """Restart ``server`` (empty) just after the fleet's second window's worth reached the
    provider, and note when in ``restarted``.

    The fleet draws a window's worth in a burst as the window frees: restarting right after a
    burst leaves the provider's window full and the forgotten one empty, the case where a second
    window's worth would slip through.
    """
    warm = 2 * camp_quota.REQUESTS
    give_up = time.monotonic() + 120
    while len(emu.quota_log("openai")) < warm and time.monotonic() < give_up:
        time.sleep(0.01)
    time.sleep(0.2)
    server.stop()
    server.start()  # empty: nothing was written to disk
    restarted.append(time.monotonic())


def run(scale: float) -> Outcome:
    """The campaign (skipped without a `redis-server` binary)."""
    outcome = Outcome(
        "quota redis restart",
        f"{camp_quota.WORKERS} processes on one Redis quota whose server restarts empty: "
        "0 429s, never above the quota",
        cap=max(1, int(2 * scale)),
    )
    if shutil.which("redis-server") is None:
        outcome.skipped = "no redis-server"
        return outcome
    started = time.monotonic()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        deadline = Deadline(240 * scale, outcome.cap)
        while deadline.more():
            server = PrivateRedis(folder)
            server.start()
            restarted: list[float] = []
            try:
                limits = {"requests": camp_quota.REQUESTS}
                event = functools.partial(_restart_when_warm, server, restarted)
                figures = camp_quota._round(server.url, limits, outcome, event=event)
            finally:
                server.stop()
            if not restarted:
                outcome.fail("the run ended before the server was restarted")
            outcome.trials += 1
    if figures:
        outcome.figure = (
            f"{camp_quota._describe(figures, {'requests': camp_quota.REQUESTS})}; the server "
            f"restarted empty just after the {2 * camp_quota.REQUESTS}th request"
        )
    outcome.seconds = time.monotonic() - started
    return outcome
