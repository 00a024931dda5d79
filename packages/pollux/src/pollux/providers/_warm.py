"""Import a provider's SDK off the event loop, before a call's deadline starts.

The first call of a process to Anthropic or Gemini imports the SDK (1-8 s on a loaded machine).
Imported inside the attempt, that blocked the event loop (every other call of a fan-out
stalled) and spent the call's ``RetryPolicy.max_elapsed_s`` before any request was sent, so
the deadline error said an attempt "was still running" when none had started. The engine awaits
``Provider.warm()`` before the deadline starts; the providers implement it with
:func:`import_off_loop`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import sys
import threading

from pollux._scrub import install_log_filter

__all__ = ["import_off_loop"]

_lock = threading.Lock()
# One import per module set for the whole process: every call of a fan-out (and every event
# loop) waits for the same one instead of finding the module half-imported in sys.modules.
_imports: dict[tuple[str, ...], concurrent.futures.Future[None]] = {}


def _load(modules: tuple[str, ...]) -> None:
    for name in modules:
        importlib.import_module(name)


async def import_off_loop(*modules: str) -> None:
    """Import ``modules`` in a worker thread (once per process); await it without blocking.

    An ImportError is not raised here: the provider raises its own ConfigurationError (with
    the install hint) when it builds its client.
    """
    if all(name in sys.modules for name in modules) and modules in _imports:
        return
    with _lock:
        future = _imports.get(modules)
        if future is None:
            future = concurrent.futures.Future()
            _imports[modules] = future
            thread = threading.Thread(
                target=_run, args=(modules, future), name="pollux-sdk-import", daemon=True
            )
            thread.start()
    try:
        await asyncio.wrap_future(future)
    except ImportError:
        return
    install_log_filter()  # the SDK's loggers exist now


def _run(modules: tuple[str, ...], future: concurrent.futures.Future[None]) -> None:
    try:
        _load(modules)
    except BaseException as exc:  # handed to every waiter
        future.set_exception(exc)
    else:
        future.set_result(None)
