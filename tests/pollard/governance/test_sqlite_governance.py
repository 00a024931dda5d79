"""On a SQLite file: secrets never reach the bytes, confirmations survive a restart."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pollard import Runtime
from pollard.errors import ConfirmationRequired, PolicyViolation
from pollard.registry import Registry

from .conftest import SECRET, Calls, ConfirmWrites, make_specs

SEND_ARGS = {"to": "ops@example.com", "token": SECRET}


def store_bytes(db: Path) -> bytes:
    # The database and its WAL/SHM side files: a secret must be in none of them.
    return b"".join(p.read_bytes() for p in sorted(db.parent.glob(db.name + "*")))


@contextmanager
def opened(db: Path, label: str, *, resume: bool = False, **options: Any) -> Iterator[Any]:
    """A runtime on the file (closed on exit, as a finished process would) and one run."""
    with (
        Runtime(db, **options) as runtime,
        runtime.resume(label) if resume else runtime.run(label) as run,
    ):
        yield run


def ask(run: Any, name: str, args: dict[str, Any]) -> str:
    with pytest.raises(ConfirmationRequired) as info:
        run.tool_call(name, args)
    return info.value.resume_token


def test_sensitive_values_never_reach_the_sqlite_file(tmp_path: Path, calls: Calls) -> None:
    db = tmp_path / "runs.db"
    registry = Registry(make_specs(calls))
    with Runtime(db, registry=registry) as runtime, runtime.run("secrets") as run:
        run.tool_call("send", SEND_ARGS)  # a call
        with pytest.raises(PolicyViolation):
            run.tool_call("send", {"to": 7, "token": SECRET})  # an invalid-args refusal
        with pytest.raises(PolicyViolation):
            run.tool_call("send", SEND_ARGS, version="9")  # a version refusal
        with pytest.raises(PolicyViolation):
            run.tool_call("unknown", {"token": SECRET})  # an unknown-action refusal
    with opened(db, "confirm", registry=registry, policies=[ConfirmWrites()]) as run:
        token = ask(run, "send", SEND_ARGS)  # a confirmation refusal
        run.confirm(token)
    with Runtime(db, registry=registry, dry_run=True) as runtime, runtime.run("dry") as run:
        run.tool_call("send", SEND_ARGS)  # a dry-run node
    assert calls.log[0] == ("send", SEND_ARGS)  # the handler did get the secret
    data = store_bytes(db)
    assert b"ops@example.com" in data  # the file is readable: the check below can fail
    assert SECRET.encode() not in data


def test_confirmation_across_a_restart_with_sensitive_args(tmp_path: Path, calls: Calls) -> None:
    db = tmp_path / "runs.db"
    registry = Registry(make_specs(calls))
    with opened(db, "restart", registry=registry, policies=[ConfirmWrites()]) as run:
        run.tool_call("lookup", {"number": "INV-1"})
        asked_from = run.cursor_id
        token = ask(run, "send", SEND_ARGS)
    # A new runtime on the same file: the pending call is in the store.
    with opened(db, "restart", resume=True, registry=registry, policies=[ConfirmWrites()]) as run:
        assert run.cursor_id == token
        with pytest.raises(ValueError, match="pass them again"):
            run.confirm(token)
        with pytest.raises(ValueError, match="do not match"):
            run.confirm(token, args={**SEND_ARGS, "token": "guess"})
        node = run.confirm(token, args=SEND_ARGS)
        assert node.parent == asked_from and node.result is not None
    assert calls.log[-1] == ("send", SEND_ARGS)
    with (
        Runtime(db, registry=registry) as runtime,
        runtime.resume("restart") as run,
        pytest.raises(KeyError, match="already used"),
    ):
        run.confirm(token)  # single-use across processes too: never re-run
    with Runtime(db, registry=registry, mode="replay") as runtime, runtime.resume("restart") as run:
        assert run.confirm(token).id == node.id  # replay serves the recorded call
    assert [name for name, _ in calls.log] == ["lookup", "send"]


def test_dry_run_confirm_across_a_restart(tmp_path: Path, calls: Calls) -> None:
    db = tmp_path / "runs.db"
    registry = Registry(make_specs(calls))
    policies = [ConfirmWrites()]
    with opened(db, "dry-restart", registry=registry, policies=policies) as run:
        token = ask(run, "send", SEND_ARGS)
    with opened(
        db, "dry-restart", resume=True, registry=registry, policies=policies, dry_run=True
    ) as run:
        node = run.confirm(token, args=SEND_ARGS)
    assert node.meta["dry_run"] is True and node.result is None
    assert calls.log == []
