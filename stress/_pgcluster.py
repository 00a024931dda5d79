"""A private PostgreSQL cluster that a campaign may stop and restart.

The machine's server at 127.0.0.1:5432 is shared with other work and is never stopped; a
campaign that needs a server outage starts its own cluster (``initdb`` into a temporary folder,
its own port and socket folder, trust authentication, no fsync) and stops only that one.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any


def binaries() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or None when PostgreSQL is not installed.

    Under root the cluster runs as the ``postgres`` user (PostgreSQL refuses root): without
    that user there is no cluster either.
    """
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for found in (shutil.which("initdb"), shutil.which("pg_ctl")):
        if found:
            candidates.append(str(Path(found).resolve().parent))
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return None
    for folder in candidates:
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateCluster:
    """One throwaway PostgreSQL cluster: `start`, `stop`, and `close` to remove it.

    PostgreSQL refuses to run as root, so under root the cluster runs as the ``postgres`` user
    (its folder is handed to that user).
    """

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.port = _free_port()
        self._tmp = tempfile.mkdtemp(prefix="pollard-pgcluster-")
        self.data = Path(self._tmp) / "data"
        self.log = Path(self._tmp) / "server.log"
        self._run_as: dict[str, Any] = {}
        try:
            if os.geteuid() == 0:
                user = pwd.getpwnam("postgres")  # KeyError: no such user, as without binaries
                os.chown(self._tmp, user.pw_uid, user.pw_gid)
                self._run_as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
            self._pg(
                "initdb",
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            )
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg(self, tool: str, *args: str) -> None:
        subprocess.run(
            [str(self.bin / tool), *args],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self._tmp,
            timeout=120,
            **self._run_as,
        )

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-p {self.port} -k {self._tmp} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off -c max_connections=60"
        )
        self._pg("pg_ctl", "start", "-w", "-D", str(self.data), "-l", str(self.log), "-o", options)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` (a clean shutdown) or ``immediate`` (a crash)."""
        self._pg("pg_ctl", "stop", "-w", "-D", str(self.data), "-m", mode)

    def close(self) -> None:
        """Stop the server if it runs and remove its folder."""
        with contextlib.suppress(subprocess.SubprocessError, OSError):  # already stopped
            self._pg("pg_ctl", "stop", "-w", "-D", str(self.data), "-m", "immediate")
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> PrivateCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
