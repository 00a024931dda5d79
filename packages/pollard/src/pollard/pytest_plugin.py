"""pytest plugin for pollard (registered through the ``pytest11`` entry point).

Loaded in every pytest session where pollard is installed, so it stays cheap to import: pollard's
runtime and stores are imported only when a test asks for the ``pollard_run`` fixture.

* ``pollard_run``: a ``Run`` whose label is the test's node id, recorded in
  ``<rootdir>/tests/pollard_recordings/<test module>.db`` (ini ``pollard_recordings_dir``).
* ``--pollard-mode=record|hybrid|replay`` (ini ``pollard_mode``); the default is ``replay`` when
  the ``CI`` environment variable is set and ``hybrid`` otherwise.
* In replay a call that was never recorded fails the test with the ``MissingRecording`` message.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

if TYPE_CHECKING:
    from pollard._runtime._sync import Run

__all__ = [
    "MODES",
    "pollard_mode",
    "pollard_run",
    "pytest_addoption",
    "pytest_report_header",
    "pytest_runtest_call",
    "recording_path",
]

MODES = ("record", "hybrid", "replay")
DEFAULT_RECORDINGS_DIR = "tests/pollard_recordings"
_FALSY = {"", "0", "false", "no", "off"}


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--pollard-mode`` and the ``pollard_mode``/``pollard_recordings_dir`` ini keys."""
    group = parser.getgroup("pollard", "pollard record/replay")
    group.addoption(
        "--pollard-mode",
        choices=MODES,
        default=None,
        help="how the pollard_run fixture treats steps: record, hybrid or replay "
        "(default: ini pollard_mode, else replay when $CI is set, else hybrid)",
    )
    parser.addini(
        "pollard_mode",
        "default mode of the pollard_run fixture (record, hybrid or replay)",
        default="",
    )
    parser.addini(
        "pollard_recordings_dir",
        "directory for pollard_run recordings, relative to the rootdir",
        default=DEFAULT_RECORDINGS_DIR,
    )


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in _FALSY


def pollard_mode(config: pytest.Config) -> str:
    """The mode the ``pollard_run`` fixture uses in this session."""
    mode = config.getoption("--pollard-mode") or str(config.getini("pollard_mode")).strip()
    if mode:
        if mode not in MODES:
            raise pytest.UsageError(f"pollard_mode must be one of {', '.join(MODES)}, got {mode!r}")
        return str(mode)
    return "replay" if _in_ci() else "hybrid"


def recording_path(config: pytest.Config, module_path: Path) -> Path:
    """Where the recordings of the tests in ``module_path`` live."""
    directory = Path(str(config.getini("pollard_recordings_dir")))
    if not directory.is_absolute():
        directory = Path(config.rootpath) / directory
    return directory / f"{module_path.stem}.db"


def pytest_report_header(config: pytest.Config) -> str | None:
    """Name the pollard mode in the session header when it was chosen explicitly."""
    if config.getoption("--pollard-mode") or str(config.getini("pollard_mode")).strip():
        return f"pollard: mode={pollard_mode(config)}"
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Turn a ``MissingRecording`` that escapes a ``pollard_run`` test into a clear failure."""
    try:
        return (yield)
    except Exception as exc:
        # Only a MissingRecording that a pollard_run test lets escape is rewritten: one clear
        # failure line instead of a traceback through pollard's runtime.
        if "pollard_run" not in getattr(item, "fixturenames", ()):
            raise
        from pollard.errors import MissingRecording

        if not isinstance(exc, MissingRecording):
            raise
        raise _missing(exc) from None


def _missing(exc: Any) -> BaseException:
    summary = getattr(exc, "payload_summary", "") or ""
    summary = f" ({summary})" if summary and summary not in str(exc) else ""
    return pytest.fail.Exception(
        f"MissingRecording: {exc}{summary}\n"
        "  record it with --pollard-mode=record or --pollard-mode=hybrid",
        pytrace=False,
    )


class _Unrecorded:
    """Stands in for a run replay cannot open: any use fails the test with the message."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _missing(self._error)

    def __enter__(self) -> Any:
        raise _missing(self._error)

    def __exit__(self, *exc: object) -> None:
        return None

    def __repr__(self) -> str:
        return f"<unrecorded pollard run: {self._error}>"


@pytest.fixture
def pollard_run(request: pytest.FixtureRequest) -> Iterator[Run]:
    """A pollard ``Run`` recorded per test module and replayed in CI.

    The run's label is the test's node id; its store is a SQLite file named after the test
    module under the recordings directory. Replay opens the file read-only and never creates
    it: a call that was not recorded fails the test with the ``MissingRecording`` message.
    """
    from pollard._runtime._sync import Runtime
    from pollard.errors import MissingRecording
    from pollard.stores.memory import MemoryStore
    from pollard.stores.sqlite import SQLiteStore

    mode = pollard_mode(request.config)
    path = recording_path(request.config, Path(str(request.node.path)))
    store: Any
    if mode != "replay":
        path.parent.mkdir(parents=True, exist_ok=True)
        store = SQLiteStore(path)
    elif path.exists():
        store = SQLiteStore(path, read_only=True)
    else:
        store = MemoryStore()
    runtime = Runtime(store, mode=mode)
    try:
        try:
            run = runtime.run(request.node.nodeid)
        except MissingRecording as exc:
            # Checked at the first use, inside the test: a replay miss is the test's failure,
            # reported with the MissingRecording message, not an error of the fixture.
            yield cast("Run", _Unrecorded(exc))
            return
        with run:
            yield run
    finally:
        runtime.close()
        store.close()
