"""Many hosts, one provider quota: 8 worker processes pace governed fan-outs to one shared window.

Each worker is a process of its own, as a separate host would be: its own pollux Session and
connection pool, its own pollard ledger (a SQLite file of its own), and its own connection to
the quota's store (one SQLite file for the machine, or one PostgreSQL store id for all). They
share only that store and the emulator, which enforces the provider's limit and answers 429 with
the provider's headers. The campaign counts what a user of many hosts cares about:

* 429s received (the goal is 0: the window paces, it never lets the provider refuse);
* the most requests and tokens that arrived inside any window, against the quota;
* aggregate throughput against the quota (the ideal is the quota's rate);
* fairness: the slowest worker's rate over the fastest's;
* on PostgreSQL, every quota connection cut mid-run (``pg_terminate_backend``): the calls fail
  closed for that moment (retried by pollux) and the run still finishes within the quota;
* on a private PostgreSQL cluster of its own (never the shared server), the server stopped
  mid-run (``pg_ctl stop -m fast``, and ``-m immediate``, a crash) and started again, once
  failing closed and once on the bounded local share: errors surfaced, the most admitted in any
  window, whether every worker resumes pacing through the store without a restart of its own,
  and the holds left behind (see `stress.camp_quota_restart`);
* on a private Redis server of its own that keeps nothing on disk, the server restarted mid-run:
  the window it forgot is held full for one window, so the fleet stays within the quota (see
  `stress.camp_quota_redis`).
"""

from __future__ import annotations

import json
import os
import tempfile
import textwrap
import threading
import time
import uuid
from bisect import bisect_left
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stress._proc import fleet, start_together
from stress._report import Deadline, Outcome

WORKERS = 8
PROMPTS = 8  # per worker and round
WINDOW_S = 4.0
REQUESTS = 8  # per window: 2 requests a second for the whole fleet (below what 2 cores run)
TOKENS = 200  # per window: binds in the token round (about 14 tokens an answer)
MAX_TOKENS = 48
PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
# The quota connections' application_name: the cut ends those and no one else's.
_APP = "pollard-quota-campaign"

_WORKER = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    import pollux
    from pollard import AsyncRuntime
    from pollard.adapters.pollux import SharedQuota, governed_run_many

    async def main():
        worker, prompts = sys.argv[1], int(sys.argv[2])
        limits = json.loads(os.environ["QUOTA_LIMITS"])
        quota = SharedQuota(
            os.environ["QUOTA_STORE"], name="fleet", window_s=float(os.environ["QUOTA_WINDOW"]),
            requests_per_minute=limits.get("requests"), tokens_per_minute=limits.get("tokens"),
        )
        config = pollux.Config(
            provider="openai", model="gpt-5-nano", api_key="k", quota=quota,
            retry=pollux.RetryPolicy(max_attempts=6, max_elapsed_s=None, initial_delay_s=0.05),
        )
        runtime = AsyncRuntime(os.environ["LEDGER_DIR"] + f"/worker-{worker}.db")
        print("ready", flush=True)
        sys.stdin.readline()
        start = time.monotonic()
        async with runtime.run(f"fleet worker {worker}") as run:
            out = await governed_run_many(
                run, [f"worker {worker} question {i}?" for i in range(prompts)],
                config=config, max_tokens=int(os.environ["QUOTA_MAX_TOKENS"]),
            )
        wall = time.monotonic() - start
        quota.close()
        runtime.close()
        errors = [o.diagnostics.error["error_category"] for o in out.outputs if o.diagnostics.error]
        print(json.dumps({"answered": len(out.outputs) - len(errors), "errors": errors,
                          "wall": wall, "waited": sum(
                              (o.diagnostics.raw.get("quota") or {}).get("waited_s", 0)
                              for o in out.outputs)}), flush=True)

    asyncio.run(main())
    """
)


def _peak(stamps: list[tuple[float, int]], window: float) -> tuple[int, int]:
    """The most requests, and tokens, that arrived inside any window of ``window`` seconds."""
    times = [t for t, _ in stamps]
    best_requests = best_tokens = 0
    for index, (stamp, _tokens) in enumerate(stamps):
        first = bisect_left(times, stamp - window + 1e-9)
        best_requests = max(best_requests, index - first + 1)
        best_tokens = max(best_tokens, sum(t for _, t in stamps[first : index + 1]))
    return best_requests, best_tokens


def _round(
    store: str,
    limits: dict[str, int],
    outcome: Outcome,
    *,
    cut: bool = False,
    event: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """One fleet run. ``cut`` ends the quota's PostgreSQL connections one and a half windows
    in; ``event`` runs on a thread of its own from the start, given the emulator (to restart a
    server once enough has reached the provider, say)."""
    from pollux.testing import Emulator, EmulatorQuota

    emulator_quota = EmulatorQuota(
        requests=limits.get("requests"), tokens=limits.get("tokens"), window_s=WINDOW_S
    )
    with (
        Emulator(latency=0.02, quotas={"openai": emulator_quota}) as emu,
        tempfile.TemporaryDirectory() as ledgers,
    ):
        env = dict(
            os.environ,
            OPENAI_BASE_URL=emu.base_url("openai"),
            QUOTA_STORE=store,
            QUOTA_WINDOW=str(WINDOW_S),
            QUOTA_LIMITS=json.dumps(limits),
            QUOTA_MAX_TOKENS=str(MAX_TOKENS),
            LEDGER_DIR=ledgers,
        )
        procs = fleet(_WORKER, WORKERS, PROMPTS, env)
        start_together(procs)  # every worker has imported everything: start-up is not timed
        start = time.monotonic()
        if cut:
            threading.Timer(WINDOW_S * 1.5, _cut_quota_connections).start()
        if event is not None:
            threading.Thread(target=event, args=(emu,), daemon=True).start()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            if proc.returncode != 0:
                outcome.fail(f"worker exited {proc.returncode}: {err.strip().splitlines()[-1:]}")
                continue
            results.append(json.loads(out.strip().splitlines()[-1]))
        wall = time.monotonic() - start
        rate_limited = emu.rate_limited("openai")
        # Every request that reached the provider, refused or not.
        arrivals = sorted((at, tokens) for at, tokens, _ in emu.quota_log("openai"))
    answered = sum(r["answered"] for r in results)
    errors = [e for r in results for e in r["errors"]]
    peak_requests, peak_tokens = _peak(arrivals, WINDOW_S)
    rates = [r["answered"] / r["wall"] for r in results if r["wall"] > 0]
    per_request = sum(t for _, t in arrivals) / len(arrivals) if arrivals else 1.0
    # The quota's sustained rate in requests per second (the token limit in requests).
    quota_rate = min(
        limits.get("requests", 10**9) / WINDOW_S,
        limits.get("tokens", 10**12) / per_request / WINDOW_S,
    )
    figures = {
        "answered": answered,
        "errors": errors,
        "429s": rate_limited,
        "peak_requests": peak_requests,
        "peak_tokens": peak_tokens,
        "throughput": answered / wall if wall else 0.0,
        "quota_rate": quota_rate,
        "fairness": min(rates) / max(rates) if rates else 0.0,
        "wall": wall,
    }
    request_limit = limits.get("requests")
    token_limit = limits.get("tokens")
    one_request_tokens = max((t for _, t in arrivals), default=0)
    if answered != WORKERS * PROMPTS:
        outcome.fail(f"{WORKERS * PROMPTS - answered} prompts not answered: {errors[:3]}")
    if rate_limited and not cut:
        outcome.fail(f"{rate_limited} requests were answered 429")
    if request_limit is not None and peak_requests > request_limit + 1:
        outcome.fail(f"{peak_requests} requests inside one window, quota {request_limit}")
    if token_limit is not None and peak_tokens > token_limit + one_request_tokens:
        outcome.fail(f"{peak_tokens} tokens inside one window, quota {token_limit}")
    outcome.worst = max(outcome.worst, rate_limited)
    return figures


def _cut_quota_connections() -> None:
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (_APP,),
        )


def _describe(figures: dict[str, Any], limits: dict[str, int]) -> str:
    quota = ", ".join(f"{v} {k}" for k, v in limits.items())
    return (
        f"{figures['answered']} answered, {figures['429s']} 429s; peak "
        f"{figures['peak_requests']} requests / {figures['peak_tokens']} tokens in a "
        f"{WINDOW_S:g} s window (quota {quota}); {figures['throughput']:.1f}/s of "
        f"{figures['quota_rate']:.1f}/s, fairness {figures['fairness']:.2f}"
    )


def _campaign(name: str, store: str, limits: dict[str, int], scale: float, cut: bool) -> Outcome:
    outcome = Outcome(
        name,
        f"{WORKERS} processes on one shared quota: 0 429s, never above the quota",
        cap=max(1, int(2 * scale)),
    )
    # The floor: the same fleet and store with a quota that never binds, in the same run.
    floor = _round(store + "-floor", {"requests": 10**6}, Outcome("floor", ""))["throughput"]
    deadline = Deadline(240 * scale, outcome.cap)
    figures: dict[str, Any] = {}
    while deadline.more():
        figures = _round(store, limits, outcome, cut=cut)
        outcome.trials += 1
    if figures:
        reachable = min(figures["quota_rate"], floor)
        outcome.figure = (
            f"{_describe(figures, limits)}; {figures['throughput'] / reachable:.2f} of "
            f"min(quota, unpaced fleet {floor:.1f}/s)"
        )
    return outcome


def _postgres_up() -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=0.5):
            return True
    except OSError:
        return False


def run(scale: float) -> list[Outcome]:
    """The quota campaigns: SQLite requests and tokens, PostgreSQL with connections cut, and a
    private PostgreSQL stopped and restarted mid-run."""
    outcomes = []
    with tempfile.TemporaryDirectory() as folder:
        sqlite = str(Path(folder) / "quota.db")
        outcomes.append(
            _campaign("quota sqlite rpm", sqlite, {"requests": REQUESTS}, scale, cut=False)
        )
        outcomes.append(
            _campaign(
                "quota sqlite tpm",
                sqlite + "2",
                {"requests": REQUESTS * 4, "tokens": TOKENS},
                scale,
                cut=False,
            )
        )
    if _postgres_up():
        from stress.camp_contention import _drop

        store = f"{PG_DSN}?application_name={_APP}#quota-{uuid.uuid4().hex[:8]}"
        try:
            outcomes.append(
                _campaign("quota postgres rpm", store, {"requests": REQUESTS}, scale, cut=False)
            )
            outcomes.append(
                _campaign(
                    "quota postgres cut", store + "c", {"requests": REQUESTS}, scale, cut=True
                )
            )
        finally:  # the shared database keeps no rows of this campaign's store ids
            for used in (store, store + "-floor", store + "c", store + "c-floor"):
                _drop(used)
    else:
        skipped = Outcome("quota postgres", "PostgreSQL at 127.0.0.1:5432")
        skipped.skipped = "no server"
        outcomes.append(skipped)
    from stress import camp_quota_redis, camp_quota_restart  # they read this module's settings

    outcomes += camp_quota_restart.run(scale)
    outcomes.append(camp_quota_redis.run(scale))
    return outcomes
