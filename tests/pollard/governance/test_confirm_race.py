"""Confirming one token from several processes at the same moment runs the handler once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pollard import HashRopeStore, MemoryStore, Runtime, SQLiteStore
from pollard.errors import ConfirmationRequired, PollardError
from pollard.registry import ActionSpec, Registry
from tests.pollard._postgres import drop_store, fresh_store_id

from .conftest import SEND_SCHEMA, Calls, ConfirmWrites, make_specs

SEND_ARGS = {"to": "ops@example.com", "token": "t-1"}

# Each worker opens the store, waits for a shared start time, confirms the token and prints
# what happened. The handler appends one line to a file per execution (O_APPEND).
WORKER = r"""
import json, sys, time
from pollard import Runtime
from pollard.errors import PollardError
from pollard.registry import ActionSpec, Registry
target, token, log, start = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
store_id = sys.argv[5] if len(sys.argv) > 5 else None
def send(args):
    with open(log, "a") as handle:
        handle.write("sent\n")
    time.sleep(0.2)  # stay inside the handler while the others try
    return {"queued": True}
schema = {"type": "object", "properties": {"to": {"type": "string"}, "token": {"type": "string",
          "sensitive": True, "description": "API token"}}, "required": ["to", "token"]}
lookup = {"type": "object", "properties": {"number": {"type": "string", "pattern": "^INV-"}},
          "required": ["number"], "additionalProperties": False}
registry = Registry([
    ActionSpec("lookup", "1", "Look up an invoice.", lookup, False),
    ActionSpec("send", "1", "Send a message.", schema, True, handler=send),
    ActionSpec("delete", "1", "Declared, not executable.", {"type": "object"}, True),
])
if store_id is None:
    store = target
else:
    from pollard import PostgresStore
    store = PostgresStore(target, store_id=store_id)
with Runtime(store, registry=registry) as rt:
    run = rt.resume("race")
    while time.time() < start:
        time.sleep(0.001)
    try:
        node = run.confirm(token, args={"to": "ops@example.com", "token": "t-1"})
        print(json.dumps({"node": node.id}))
    except PollardError as exc:
        print(json.dumps({"error": str(exc)}))
"""


def _ask(runtime: Runtime) -> str:
    with runtime.run("race") as run, pytest.raises(ConfirmationRequired) as info:
        run.tool_call("send", SEND_ARGS)
    return info.value.resume_token


def _race(tmp_path: Path, target: str, token: str, *extra: str) -> tuple[int, list[Any]]:
    log = tmp_path / "sent.log"
    log.touch()
    start = time.time() + 1.5  # every worker imports pollard and opens the store first
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, target, token, str(log), str(start), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outcomes.append(json.loads(out))
    return log.read_text().count("sent"), outcomes


def _check(executions: int, outcomes: list[Any], node_id: str) -> None:
    assert executions == 1  # never twice, and it did run
    nodes = {o["node"] for o in outcomes if "node" in o}
    assert nodes <= {node_id}
    assert any("node" in o for o in outcomes)
    for outcome in outcomes:
        if "error" in outcome:
            assert (
                "another runtime is executing this confirmation" in outcome["error"]
                or "already used" in outcome["error"]
            )


@pytest.mark.slow
def test_processes_confirming_one_token_run_the_handler_once(tmp_path: Path, calls: Calls) -> None:
    db = tmp_path / "runs.db"
    registry = Registry(make_specs(calls))
    with Runtime(db, registry=registry, policies=[ConfirmWrites()]) as runtime:
        token = _ask(runtime)
    executions, outcomes = _race(tmp_path, str(db), token)
    with SQLiteStore(db) as store:
        status = store.get(token).meta["confirmation"]
        assert status["status"] == "confirmed"
        _check(executions, outcomes, status["node_id"])
        sends = [n for n in store.walk(store.roots()[0].id) if n.kind.value == "tool_call"]
        assert len(sends) == 1  # no duplicate dispatch was recorded either


@pytest.mark.postgres
@pytest.mark.slow
def test_processes_confirming_one_token_on_postgres(
    tmp_path: Path, calls: Calls, pg_dsn: str
) -> None:
    from pollard import PostgresStore

    store_id = fresh_store_id("confirm")
    try:
        registry = Registry(make_specs(calls))
        with (
            PostgresStore(pg_dsn, store_id=store_id) as store,
            Runtime(store, registry=registry, policies=[ConfirmWrites()]) as runtime,
        ):
            token = _ask(runtime)
        executions, outcomes = _race(tmp_path, pg_dsn, token, store_id)
        with PostgresStore(pg_dsn, store_id=store_id) as store:
            status = store.get(token).meta["confirmation"]
            _check(executions, outcomes, status["node_id"])
    finally:
        drop_store(pg_dsn, store_id)


@pytest.mark.parametrize("make", [MemoryStore, HashRopeStore, SQLiteStore])
def test_a_lost_claim_refuses(make: Any, tmp_path: Path, calls: Calls) -> None:
    store = make(tmp_path / "claims.db") if make is SQLiteStore else make()
    registry = Registry(make_specs(calls))
    with store, Runtime(store, registry=registry, policies=[ConfirmWrites()]) as runtime:
        token = _ask(runtime)
        # Another runtime holds the claim and has not finished: this one must not execute.
        assert store.claim(f"confirm:{token}:0", "someone-else") == "someone-else"
        with runtime.resume("race") as run, pytest.raises(PollardError, match="another runtime"):
            run.confirm(token, args=SEND_ARGS)
        assert calls.log == []
        # Once the winner records its node, the token is used up: a late confirm raises.
        winner = runtime.store.get(token).parent
        assert winner is not None
        runtime.store.update_meta(
            token, {"confirmation": {"status": "confirmed", "node_id": winner}}
        )
        with runtime.resume("race") as run, pytest.raises(KeyError, match="already used"):
            run.confirm(token, args=SEND_ARGS)
        assert calls.log == []
        if isinstance(store, HashRopeStore):  # the claim survives the log round trip
            assert HashRopeStore(store.to_bytes()).claim(f"confirm:{token}:0", "x") != "x"


def test_a_failed_confirmation_can_be_retried_once(calls: Calls) -> None:
    failures: list[dict[str, Any]] = []

    def flaky(args: dict[str, Any]) -> dict[str, Any]:
        if not failures:
            failures.append(args)
            raise RuntimeError("smtp down")
        return calls.send(args)

    specs = make_specs(calls)
    specs[1] = ActionSpec("send", "1", "Send a message.", SEND_SCHEMA, True, handler=flaky)
    registry = Registry(specs)
    with Runtime(registry=registry, policies=[ConfirmWrites()]) as runtime:
        token = _ask(runtime)
        with runtime.resume("race") as run, pytest.raises(RuntimeError, match="smtp down"):
            run.confirm(token)
        assert runtime.store.get(token).meta["confirmation"] == {"status": "retry", "round": 1}
        with runtime.resume("race") as run:
            run.confirm(token)
            with pytest.raises(KeyError, match="already used"):
                run.confirm(token)  # single-use, as in pollard 0.8
        assert calls.log == [("send", SEND_ARGS)]
