"""Who holds a writer lease, and whether that process is provably gone (same host only).

A writer lease ends when its holder stops renewing it. A holder that was killed (SIGKILL, an
OOM kill, a closed laptop lid) cannot renew nor release it, so without more a resume waits for
the lease. Each writer therefore records its process: the host (name, boot id, pid namespace)
and the pid with the process's start time. A process on the same host can then tell that the
holder is gone, when its pid no longer runs or now belongs to a process started at another
time, and take its lease over at once.

Only a provably gone holder is taken over early: a holder on another host, or one whose
liveness cannot be read here (no ``/proc``, another pid namespace, a lease written without an
identity), keeps the lease, as does a stalled process (stopped, paused, swapping): it is alive.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["Liveness", "holder_text", "liveness", "this_process"]

Liveness = Literal["alive", "gone", "unknown"]

_CACHE: dict[int, dict[str, Any]] = {}  # pid -> identity (a forked child computes its own)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int] | None:
    """The state letter and start time (clock ticks after boot) of ``pid``, or None."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    # Field 2 (the command name) is in parentheses and may hold spaces or parentheses itself:
    # the fields after the last ')' start at field 3 (the state); the start time is field 22.
    rest = text[text.rfind(")") + 1 :].split()
    try:
        return rest[0], int(rest[19])
    except (IndexError, ValueError):
        return None


def _host() -> dict[str, Any]:
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        # Containers may share a host name and a kernel (one boot id) but not their pids.
        pidns: str | None = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = None
    return {
        "host": socket.gethostname(),
        "boot": boot.strip() if boot else None,
        "pidns": pidns,
    }


def this_process() -> dict[str, Any]:
    """This process as a writer lease's holder: host, boot id, pid namespace, pid, start time.

    ``boot``, ``pidns`` and ``start`` are None where they cannot be read (not Linux): such a
    holder is never judged gone, its lease ends only by expiry.
    """
    pid = os.getpid()
    found = _CACHE.get(pid)
    if found is None:
        stat = _stat(pid)
        found = {**_host(), "pid": pid, "start": None if stat is None else stat[1]}
        _CACHE.clear()
        _CACHE[pid] = found
    return dict(found)


def liveness(holder: Mapping[str, Any] | None) -> Liveness:
    """Whether the process that ``holder`` names is running (``alive``) or provably ``gone``.

    ``unknown`` for a holder on another host (or pid namespace, or boot), one recorded without
    an identity or without a start time, and whenever this host cannot read the process table.
    """
    if not isinstance(holder, Mapping):
        return "unknown"
    pid, start = holder.get("pid"), holder.get("start")
    if not isinstance(pid, int) or not isinstance(start, int) or isinstance(pid, bool) or pid <= 0:
        return "unknown"
    me = this_process()
    if me["start"] is None or any(
        me[key] is None or holder.get(key) != me[key] for key in ("host", "boot", "pidns")
    ):
        return "unknown"
    if pid == me["pid"]:
        return "alive" if start == me["start"] else "gone"
    try:
        # Signal 0 checks existence only; unlike /proc it is not hidden by hidepid mounts, so
        # another user's running process is never mistaken for a gone one.
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        pass  # it exists (another user's): its start time below tells whether it is the holder
    except OSError:
        return "unknown"
    stat = _stat(pid)
    if stat is None:
        return "unknown"
    state, started = stat
    if started != start:
        return "gone"  # the pid was reused by a process started at another time
    # A zombie (killed, not yet reaped by its parent) or a dead task never writes again.
    return "gone" if state in ("Z", "X", "x") else "alive"


def holder_text(holder: Mapping[str, Any] | None, state: Liveness) -> str:
    """The holder for a message: ``pid 123 on this host, still running``, and the like."""
    if not isinstance(holder, Mapping) or not isinstance(holder.get("pid"), int):
        return "a writer that recorded no process identity"
    pid, host = holder["pid"], holder.get("host")
    if state == "alive" and pid == os.getpid():
        return f"pid {pid}, this very process: another of its runtimes is open"
    if state == "alive":
        return f"pid {pid} on this host, still running"
    if state == "gone":
        return f"pid {pid} on this host, no longer running"
    if host == this_process()["host"]:
        return f"pid {pid} on this host (its liveness cannot be read here)"
    return f"pid {pid} on host {host!r} (another host: its liveness cannot be checked from here)"
