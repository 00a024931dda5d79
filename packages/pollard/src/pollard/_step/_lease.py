"""Lease renewal for the reservations of running steps."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pollard._core._store import Store

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
        self._writer: str | None = None
        self.writer_renewed = 0.0  # monotonic time of the writer's last successful renewal
        # Renewals that came a lease or more after the previous one (a paused or stopped
        # process, a store that was down): the lease may have lapsed meanwhile and another
        # writer taken its nodes, so every node is taken again before the next append.
        self.writer_lapses = 0

    def add(self, reservation_id: str) -> None:
        # Single dict operations are atomic under the GIL; the lock only guards the thread start.
        self._active[reservation_id] = time.monotonic()
        self._start()

    def keep_writer(self, writer: str) -> None:
        """Renew ``writer``'s liveness too (registered once by the runtime)."""
        self._writer = writer
        self.writer_renewed = time.monotonic()
        self._start()

    def _start(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._closed:
                    # Published once started: close() may join it from another thread.
                    thread = threading.Thread(
                        target=self._loop, name="pollard-lease-keeper", daemon=True
                    )
                    thread.start()
                    self._thread = thread

    def remove(self, reservation_id: str) -> bool:
        """Stop renewing a reservation; True when it was still tracked."""
        return self._active.pop(reservation_id, None) is not None

    def drain(self) -> list[str]:
        """Stop renewing every tracked reservation and return their ids."""
        held = list(self._active)
        for rid in held:
            self._active.pop(rid, None)
        return held

    def _loop(self) -> None:
        interval = max(self._lease / 3, 0.05)
        renewed: dict[str, float] = {}  # owned by this thread
        while not self._wake.wait(interval):
            now = time.monotonic()
            writer = self._writer
            if writer is not None:
                started = time.monotonic()  # the store's lease counts from no later than this
                with contextlib.suppress(Exception):  # a lapse shows as a stale writer
                    self._store.lease_writer(writer, self._lease)
                    if started - self.writer_renewed >= self._lease:
                        self.writer_lapses += 1  # counted before the renewal shows as fresh
                    self.writer_renewed = started
            active = dict(self._active)  # an atomic snapshot; steps add and remove freely
            for rid in [rid for rid in renewed if rid not in active]:
                del renewed[rid]
            for rid, since in active.items():
                if now - renewed.get(rid, since) >= interval:
                    with contextlib.suppress(Exception):  # best effort; settlement decides
                        self._store.renew(rid, self._lease)
                    renewed[rid] = now

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        with self._lock:  # not while another thread is starting it
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)
