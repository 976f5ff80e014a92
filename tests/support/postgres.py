"""A throwaway PostgreSQL server for tests: ``initdb`` into a temporary directory, ``pg_ctl start``
on a free loopback port, and on exit ``pg_ctl stop`` and a kill of the postmaster by its PID (read
from ``postmaster.pid``), so that no server outlives the test that started it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune.clock import SystemClock, wait_until
from autotune.platforms.local.ports import free_port

USER = "autotune"
"""The superuser ``initdb`` creates."""


@dataclass(frozen=True)
class PostgresServer:
    port: int
    pid: int
    """The postmaster's PID: what the server is stopped by."""
    user: str = USER

    def url(self, password: str | None = None, database: str = "postgres") -> str:
        """A SQLAlchemy URL of the server (psycopg2), with ``password`` if given."""
        auth = self.user if password is None else f"{self.user}:{password}"
        return f"postgresql+psycopg2://{auth}@127.0.0.1:{self.port}/{database}"


def _as_postgres(argv: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; CI and our machines run tests as root.
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process (postgres's): it exists
        return True
    return True


def _stop(data: Path, pid: int) -> None:
    subprocess.run(_as_postgres(["pg_ctl", "-D", str(data), "-m", "immediate", "stop"]),
                   capture_output=True)
    # The postmaster is not our child: wait for its PID to go, and kill it if it does not.
    if not wait_until(SystemClock(), lambda: not _alive(pid), timeout=10, every=0.05):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextmanager
def postgres_server(prefix: str = "autotune-pg-", password: str | None = None
                    ) -> Iterator[PostgresServer]:
    """A PostgreSQL server for the ``with`` block: trust authentication, or scram-sha-256 with
    ``password`` for the superuser. Fails the test when PostgreSQL's server binaries are not on
    PATH."""
    for tool in ("initdb", "pg_ctl"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not on PATH: install PostgreSQL's server binaries")
    # Not under pytest's tmp dir: that is private to root, and the server runs as postgres.
    base = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        base.chmod(0o777)
        data = base / "data"
        auth = ["--auth=trust"]
        if password is not None:
            pwfile = base / "pw"
            pwfile.write_text(password + "\n")
            pwfile.chmod(0o644)
            auth = ["--auth=scram-sha-256", f"--pwfile={pwfile}"]
        try:
            subprocess.run(_as_postgres(["initdb", "-D", str(data), "-U", USER, "-E", "UTF8",
                                         *auth]), check=True, capture_output=True, text=True)
        finally:
            if password is not None:
                (base / "pw").unlink(missing_ok=True)
        port = free_port()
        subprocess.run(_as_postgres(["pg_ctl", "-D", str(data), "-w", "-l", str(data / "log"),
                                     "-o", f"-h 127.0.0.1 -p {port} -k {data}", "start"]),
                       check=True, capture_output=True)
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        try:
            yield PostgresServer(port, pid)
        finally:
            _stop(data, pid)
    finally:
        shutil.rmtree(base, ignore_errors=True)
