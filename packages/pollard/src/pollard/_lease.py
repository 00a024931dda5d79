"""Lease renewal for the reservations of running steps."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["LeaseKeeper"]


class LeaseKeeper:
    """Renews the leases of in-flight reservations from one daemon thread per runtime."""

    def __init__(self, store: Store, lease_seconds: float) -> None:
        self._store = store
        self._lease = lease_seconds
        self._active: dict[str, float] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def add(self, reservation_id: str) -> None:
        with self._lock:
            self._active[reservation_id] = time.monotonic()
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._loop, name="pollard-lease-keeper", daemon=True
                )
                self._thread.start()

    def remove(self, reservation_id: str) -> None:
        with self._lock:
            self._active.pop(reservation_id, None)

    def _loop(self) -> None:
        interval = max(self._lease / 3, 0.05)
        while not self._wake.wait(interval):
            now = time.monotonic()
            with self._lock:
                due = [rid for rid, since in self._active.items() if now - since >= interval]
            for rid in due:
                with contextlib.suppress(Exception):  # renewal is best effort; settle decides
                    self._store.renew(rid, self._lease)
                with self._lock:
                    if rid in self._active:
                        self._active[rid] = now

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=5)
