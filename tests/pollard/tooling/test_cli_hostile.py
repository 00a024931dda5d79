"""Issue 31: pollard on damaged stores, FIFOs and symlink loops; amounts and depth refused at
construction or recording. Damage is an integrity finding or IntegrityError, never a crash or
a hang."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sqlite3
import threading
from decimal import Decimal
from pathlib import Path

import pytest

from pollard import Budget, IntegrityError, Runtime
from pollard.cli import main
from pollard.meters import CostMeter, StepMeter


def _cli(*args: str) -> tuple[object, str, str]:
    """``pollard ARGS`` in a thread that must finish (a FIFO or a huge number would block it)."""
    result: dict[str, object] = {}

    def run() -> None:
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                result["code"] = main(list(args))
        except BaseException as exc:
            result["code"] = f"{type(exc).__name__}: {exc}"
        result["out"], result["err"] = out.getvalue(), err.getvalue()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), f"pollard {args} hangs"
    return result["code"], str(result["out"]), str(result["err"])


def _store(path: Path, budget: Budget | None = None) -> None:
    with Runtime(path, meters=[StepMeter()]) as runtime:
        run = runtime.run("fixture", budget=budget)
        run.model_call({"model": "m"}, fn=lambda _: {"text": "x"})  # charges a step


def _damage(path: Path, sql: str, *params: object) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute(sql, params)
        db.commit()


READERS = [
    ["runs", "{s}"], ["show", "{s}", "fixture"], ["report", "{s}", "fixture"],
    ["report", "--json", "{s}", "fixture"], ["verify", "{s}"], ["seal", "{s}", "fixture"],
    ["gc", "{s}", "compact"], ["merge", "{d}/out.db", "{s}"],
    ["export", "{s}", "fixture", "{d}/x.json"],
]  # fmt: skip


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("UPDATE nodes SET meta = ?", ("[1, 2]",)),
        (
            "UPDATE nodes SET payload = ? WHERE kind != 0",
            ('{"a": ' + "[" * 5000 + "]" * 5000 + "}",),
        ),
        ("UPDATE ledger SET total = ?", ("1e999999999",)),
    ],
)
@pytest.mark.parametrize("argv", READERS)
def test_damage_is_an_integrity_finding_never_a_crash(
    tmp_path: Path, sql: str, params: tuple[object, ...], argv: list[str]
) -> None:
    store = tmp_path / "runs.db"
    _store(store, Budget(steps=10))
    _damage(store, sql, *params)
    code, _, err = _cli(*(a.format(s=store, d=tmp_path) for a in argv))
    if "ledger" in sql and argv[0] in ("runs", "show", "seal", "export", "merge", "gc"):
        assert code == 0, err  # these do not read the ledger's totals
    else:
        assert code == 1, (code, err)
    assert "unexpected" not in err and "Traceback" not in err


def test_a_huge_ledger_total_is_an_integrity_error_on_the_next_step(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    _store(store, Budget(steps=10))
    _damage(store, "UPDATE ledger SET total = '1e999999999'")
    code, out, _ = _cli("verify", str(store))
    assert code == 1 and "1e999999999" in out
    code, _, err = _cli("report", str(store), "fixture")
    assert code == 1 and err.startswith("pollard: integrity: "), err
    with Runtime(store, meters=[StepMeter()]) as runtime:
        run = runtime.run("fixture", budget=Budget(steps=10))
        with pytest.raises(IntegrityError, match="not a decimal amount"):
            run.model_call({"model": "m"}, fn=lambda _: {"text": "y"})


def test_every_path_argument_refuses_a_fifo(tmp_path: Path) -> None:
    journal = Path("/dev/null-journal").exists()  # left by something else on this machine
    good = tmp_path / "good.db"
    _store(good)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "tree.json").write_text("{}")
    f, g = str(fifo), str(good)
    commands = [
        ["runs", f], ["show", f, "x"], ["report", f, "x"], ["verify", f], ["seal", f, "x"],
        ["merge", f, g], ["merge", str(tmp_path / "o.db"), f], ["gc", f, "compact"],
        ["export", f, "x", str(tmp_path / "y.json")], ["export", g, "fixture", f],
        ["import", f, str(tmp_path / "i.db")], ["import", str(tmp_path / "tree.json"), f],
        ["show", g, "fixture", "--html", f], ["seal", g, "fixture", "--output", f],
        ["gc", "/dev/null", "compact"], ["merge", "/dev/null", g],
    ]  # fmt: skip
    for argv in commands:
        code, _, err = _cli(*argv)
        assert code == 2 and err.startswith("pollard: ") and len(err.splitlines()) == 1, (argv, err)
    assert journal or not Path("/dev/null-journal").exists()


def test_a_symlink_loop_is_one_line(tmp_path: Path) -> None:
    good = tmp_path / "good.db"
    _store(good)
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for argv in (
        ["merge", str(tmp_path / "o.db"), str(tmp_path / "a")],
        ["merge", str(tmp_path / "a"), str(good)],
        ["runs", str(tmp_path / "a")],
    ):
        code, _, err = _cli(*argv)
        assert code == 2 and "unexpected" not in err and len(err.splitlines()) == 1, (argv, err)
    assert not (tmp_path / "o.db").exists()


def test_reading_a_wal_without_shm_creates_nothing_beside_it(tmp_path: Path) -> None:
    live = tmp_path / "live" / "runs.db"
    live.parent.mkdir()
    copy = tmp_path / "copy" / "runs.db"
    copy.parent.mkdir()
    with Runtime(live) as runtime:
        run = runtime.run("fixture")
        run.note({"i": 1})
        # A backup taken while the writer is open: the main file and its -wal, no -shm.
        shutil.copyfile(live, copy)
        shutil.copyfile(f"{live}-wal", f"{copy}-wal")
    for argv in (["runs", str(copy)], ["verify", str(copy)], ["report", str(copy), "fixture"]):
        code, _, err = _cli(*argv)
        assert code == 0, err
    assert "verified 2 node(s)" in _cli("verify", str(copy))[1]  # the -wal's note was read
    assert sorted(p.name for p in copy.parent.iterdir()) == ["runs.db", "runs.db-wal"]


def test_a_payload_or_result_nested_too_deep_is_refused_when_recorded() -> None:
    deep: object = []
    for _ in range(1500):
        deep = [deep]
    with Runtime(None) as runtime:
        run = runtime.run("deep")
        with pytest.raises(TypeError, match="nested deeper than 512"):
            run.model_call({"model": "m", "messages": deep}, fn=lambda _: {"text": "x"})
        with pytest.raises(TypeError, match="nested deeper"):
            run.model_call({"model": "m"}, fn=lambda _: {"text": "x", "raw": deep})


@pytest.mark.parametrize("limit", [Decimal("1e999999999"), "1e999999999", 10**40, Decimal("1e-99")])
def test_budget_limits_out_of_range_are_refused(limit: object) -> None:
    with pytest.raises(ValueError):
        Budget(steps=limit)  # type: ignore[arg-type]


def test_a_negative_price_is_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        CostMeter({"m": {"input_per_1m": "-1", "output_per_1m": "1"}})
    with pytest.raises(ValueError, match="must be >= 0"):
        CostMeter({}, default={"input_per_1m": "1", "output_per_1m": -0.5})
