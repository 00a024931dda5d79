"""The quota's PostgreSQL server stopped mid-run and started again (part of ``stress quota``).

The shared server at 127.0.0.1:5432 is never stopped: the round starts a private cluster of its
own (`stress._pgcluster`), runs the quota campaign's 8 worker processes against it, stops the
server for a few seconds mid-run and starts it again, then reads what happened:

* the errors surfaced to the workers (failing closed, each names the unreachable store and
  gives a hint; a traceback or a silent failure is a failure of the round);
* the 429s, and the most requests that reached the provider inside any window, over the whole
  run and over the windows that touch the outage;
* whether every worker resumes pacing through the shared store after the restart, without
  restarting (its first admission by the store after the server is back);
* the holds left in the quota's windows once every settled hold has expired (0: a hold the
  outage cut off is released, or expires, and the window never counts it twice).

``QUOTA_RESTART_DEBUG=1`` prints each worker's admissions on a timeline (``s``: by the store,
``L``: by the local share) beside the provider's arrivals.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import textwrap
import threading
import time
from typing import Any

from stress._pgcluster import PrivateCluster, binaries
from stress._proc import fleet, start_together
from stress._report import Outcome
from stress.camp_quota import MAX_TOKENS, REQUESTS, WINDOW_S, WORKERS, _peak

PROMPTS = 8  # per worker: 64 calls at 2 a second, about 32 s a round
WARM = 2 * REQUESTS  # the server is stopped once two windows' worth reached the provider
# From the moment the server is down until it is started again: longer than a window, so the
# local share (which starts full for one window) admits during the outage.
OUTAGE_S = 1.5 * WINDOW_S

_WORKER = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    import pollux
    from pollard import AsyncRuntime
    from pollard.adapters.pollux import SharedQuota, governed_run_many

    class Recorded:
        # The quota as pollux sees it, noting each admission: when, and whether the shared
        # store or the local share admitted it.
        def __init__(self, inner):
            self.inner, self.admitted = inner, []
            self.default_output_tokens = inner.default_output_tokens

        async def acquire(self, request):
            permit = await self.inner.acquire(request)
            shared = type(permit).__name__ == "_SharedPermit"
            self.admitted.append((time.monotonic(), shared))
            return permit

        async def pause(self, request, seconds):
            await self.inner.pause(request, seconds)

    async def main():
        worker, prompts = sys.argv[1], int(sys.argv[2])
        local = os.environ["QUOTA_UNREACHABLE"] == "local"
        quota = SharedQuota(
            os.environ["QUOTA_STORE"], name="fleet", window_s=float(os.environ["QUOTA_WINDOW"]),
            requests_per_minute=int(os.environ["QUOTA_REQUESTS"]),
            on_unreachable=os.environ["QUOTA_UNREACHABLE"],
            workers=int(os.environ["QUOTA_WORKERS"]) if local else None,
        )
        recorded = Recorded(quota)
        config = pollux.Config(
            provider="openai", model="gpt-5-nano", api_key="k", quota=recorded,
            retry=pollux.RetryPolicy(max_attempts=6, max_elapsed_s=None, initial_delay_s=0.05),
        )
        runtime = AsyncRuntime(os.environ["LEDGER_DIR"] + f"/worker-{worker}.db")
        import openai  # the provider SDK, else loaded on the first call: start-up is not timed
        print("ready", flush=True)
        sys.stdin.readline()
        start = time.monotonic()
        # A job queue's consumer: a prompt that failed is sent again half a second later (in a
        # run of its own), as a service would, so the worker itself is never restarted.
        pending = [f"worker {worker} question {i}?" for i in range(prompts)]
        errors, passes = [], 0
        while pending and time.monotonic() - start < 300:
            async with runtime.run(f"fleet worker {worker} pass {passes}") as run:
                out = await governed_run_many(
                    run, pending, config=config, max_tokens=int(os.environ["QUOTA_MAX_TOKENS"]),
                )
            failed = []
            for prompt, output in zip(pending, out.outputs):
                error = output.diagnostics.error
                if error:
                    errors.append({k: error.get(k) for k in ("error_category", "message", "hint")})
                    failed.append(prompt)
            pending, passes = failed, passes + 1
            if pending:
                await asyncio.sleep(0.5)
        wall = time.monotonic() - start
        quota.close()
        runtime.close()
        print(json.dumps({"answered": prompts - len(pending), "errors": errors, "wall": wall,
                          "admitted": recorded.admitted}), flush=True)

    asyncio.run(main())
    """
)


def _live_holds(dsn: str, store_id: str) -> int:
    """Reservations of ``store_id`` whose lease has not ended (by the server's clock)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pollard_reservations WHERE store_id = %s "
            "AND expires > extract(epoch from clock_timestamp())",
            (store_id,),
        ).fetchone()
    return int(row[0]) if row else 0


def _round(
    cluster: PrivateCluster, store_id: str, unreachable: str, stop_mode: str, outcome: Outcome
) -> dict[str, Any]:
    from pollux.testing import Emulator, EmulatorQuota

    limits = {"requests": REQUESTS}
    with (
        Emulator(
            latency=0.02,
            quotas={"openai": EmulatorQuota(requests=REQUESTS, window_s=WINDOW_S)},
        ) as emu,
        tempfile.TemporaryDirectory() as ledgers,
    ):
        env = dict(
            os.environ,
            OPENAI_BASE_URL=emu.base_url("openai"),
            QUOTA_STORE=f"{cluster.dsn}#{store_id}",
            QUOTA_WINDOW=str(WINDOW_S),
            QUOTA_REQUESTS=str(REQUESTS),
            QUOTA_UNREACHABLE=unreachable,
            QUOTA_WORKERS=str(WORKERS),
            QUOTA_MAX_TOKENS=str(MAX_TOKENS),
            LEDGER_DIR=ledgers,
        )
        procs = fleet(_WORKER, WORKERS, PROMPTS, env)
        start_together(procs)
        start = time.monotonic()
        times: dict[str, float] = {}
        pg_errors: list[str] = []

        def outage() -> None:
            # Mid-run and warm: every worker opened its store connection and the window paces.
            while len(emu.quota_log("openai")) < WARM and time.monotonic() - start < 120:
                time.sleep(0.05)
            time.sleep(WINDOW_S / 2)
            times["stopping"] = time.monotonic()
            try:
                cluster.stop(stop_mode)
                times["down"] = time.monotonic()
                time.sleep(OUTAGE_S)
                cluster.start()
                times["up"] = time.monotonic()
            except (OSError, subprocess.SubprocessError) as exc:
                pg_errors.append(f"pg_ctl failed: {exc}")

        thread = threading.Thread(target=outage)
        thread.start()
        results = []
        stderr_lines: list[str] = []
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            stderr_lines += err.splitlines()
            if proc.returncode != 0:
                outcome.fail(f"worker exited {proc.returncode}: {err.strip().splitlines()[-1:]}")
                continue
            results.append(json.loads(out.strip().splitlines()[-1]))
        end = time.monotonic()
        thread.join()
        for note in pg_errors:
            outcome.fail(note)
        rate_limited = emu.rate_limited("openai")
        arrivals = sorted((at, tokens) for at, tokens, _ in emu.quota_log("openai"))
    # Every hold a settlement wrote ends one window after its answer; what is live a window
    # after the run is an in-flight hold nobody settled or released.
    time.sleep(max(0.0, WINDOW_S + 0.5 - (time.monotonic() - end)))
    leaked = _live_holds(cluster.dsn, store_id)

    stopping, up = times.get("stopping", end), times.get("up", end)
    answered = sum(r["answered"] for r in results)
    errors = [e for r in results for e in r["errors"]]
    tracebacks = sum("Traceback" in line for line in stderr_lines)
    warnings = [line for line in stderr_lines if "unreachable" in line]
    # Windows that touch the outage: from one window before the stop to one after the restart.
    near = [(at, t) for at, t in arrivals if stopping - WINDOW_S <= at <= up + WINDOW_S]
    peak_requests, _ = _peak(arrivals, WINDOW_S)
    near_requests, _ = _peak(near, WINDOW_S)
    # A worker resumed when the store admitted it again after the restart (its lag is also the
    # pacing's: the fleet shares the window); None: never, of those that sent anything after.
    lags: list[float | None] = []  # of the workers that sent anything after the restart
    for r in results:
        if any(at >= up for at, _ in r["admitted"]):
            after = [at for at, shared in r["admitted"] if shared and at >= up]
            lags.append(min(after) - up if after else None)
    local_admits = sum(1 for r in results for _, shared in r["admitted"] if not shared)
    local_after = sum(1 for r in results for at, shared in r["admitted"] if not shared and at >= up)
    unclear = [
        e
        for e in errors
        if e["error_category"] != "quota_unavailable"
        or "cannot be reached" not in (e["message"] or "")
        or store_id not in (e["message"] or "")
        or not e["hint"]
    ]
    figures = {
        "answered": answered,
        "errors": len(errors),
        "unclear_errors": unclear[:2],
        "429s": rate_limited,
        "peak_requests": peak_requests,
        "near_requests": near_requests,
        "throughput": answered / (end - start),
        "local_admits": local_admits,
        "local_after": local_after,
        "warnings": len(warnings),
        "tracebacks": tracebacks,
        "resumed": sum(lag is not None for lag in lags),
        "active": len(lags),
        "resume_lag": min((lag for lag in lags if lag is not None), default=None),
        "leaked": leaked,
        "outage": up - stopping,
        "wall": end - start,
    }
    if os.environ.get("QUOTA_RESTART_DEBUG"):
        print("stop", stopping - start, "down", times.get("down", end) - start, "up", up - start)
        for r in results:
            print(
                " ".join(f"{at - start:.1f}{'s' if sh else 'L'}" for at, sh in r["admitted"]),
                [e["message"] for e in r["errors"][:1]],
            )
        print("arrivals", " ".join(f"{at - start:.1f}" for at, _ in arrivals))
    if tracebacks:
        outcome.fail(f"{tracebacks} tracebacks on the workers' stderr")
    if unclear:
        outcome.fail(f"an error that does not name the unreachable store: {unclear[0]}")
    if answered != WORKERS * PROMPTS:
        outcome.fail(f"{WORKERS * PROMPTS - answered} prompts never answered: {errors[-1:]}")
    if unreachable == "local" and errors:
        outcome.fail(f"{len(errors)} calls failed on the local share: {errors[0]}")
    if unreachable == "local" and local_admits and not warnings:
        outcome.fail("the local share was used without a warning")
    if peak_requests > limits["requests"] + 1:
        outcome.fail(f"{peak_requests} requests inside one window, quota {limits['requests']}")
    if figures["resumed"] < len(lags):
        outcome.fail(f"{len(lags) - figures['resumed']} workers never drew on the store again")
    if leaked:
        outcome.fail(f"{leaked} holds left in the quota's windows after the run")
    outcome.worst = max(outcome.worst, peak_requests - limits["requests"], rate_limited)
    return figures


def _describe(f: dict[str, Any]) -> str:
    lag = "never" if f["resume_lag"] is None else f"{f['resume_lag']:.1f} s"
    return (
        f"{f['answered']} answered, {f['errors']} attempts failed closed, "
        f"{f['local_admits']} on the local share; {f['429s']} 429s; peak "
        f"{f['peak_requests']} requests in a {WINDOW_S:g} s window "
        f"({f['near_requests']} near the outage; quota {REQUESTS}); "
        f"{f['throughput']:.1f}/s; {f['resumed']}/{f['active']} resumed on the store "
        f"(the first {lag} after the restart; {f['local_after']} local after it); "
        f"{f['leaked']} holds left; "
        f"{f['tracebacks']} tracebacks"
    )


def run(scale: float) -> list[Outcome]:
    """Stop and restart a private PostgreSQL mid-run, failing closed and on the local share."""
    rounds = [("fail", "fast"), ("local", "fast"), ("fail", "immediate"), ("local", "immediate")]
    outcomes = [
        Outcome(
            f"quota pg restart {unreachable} {mode}",
            "server stopped and restarted mid-run: clear errors or the local share, never "
            "above the quota, every worker resumes on the store, no hold left",
        )
        for unreachable, mode in rounds
    ]
    bin_dir = binaries()
    if bin_dir is None:
        for outcome in outcomes:
            outcome.skipped = "skipped: no PostgreSQL binaries (initdb)"
        return outcomes
    try:
        cluster = PrivateCluster(bin_dir)
    except (OSError, KeyError, subprocess.SubprocessError) as exc:
        for outcome in outcomes:
            outcome.skipped = f"skipped: cannot initdb a private cluster ({type(exc).__name__})"
        return outcomes
    with cluster:
        cluster.start()
        for (unreachable, mode), outcome in zip(rounds, outcomes, strict=True):
            outcome.cap = max(1, int(scale))
            round_start = time.monotonic()
            for trial in range(outcome.cap):
                figures = _round(
                    cluster, f"restart-{unreachable}-{mode}-{trial}", unreachable, mode, outcome
                )
                outcome.trials += 1
                outcome.figure = _describe(figures)
            outcome.seconds = time.monotonic() - round_start
    return outcomes
