"""Shared by the nightly tests: a simulated experiment file, the CLI as a process, and a real
PostgreSQL server (started like tests/integration/test_postgres_workers.py starts one)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def simulated_doc(**study: Any) -> dict[str, Any]:
    """A small simulated experiment: the optimum far from the baseline (unset = 8, gc off)."""
    return {
        "name": "nightly",
        "target": {"simulated": {"optimum": {"GOMAXPROCS": 2, "gc": 2000},
                                 "unset": {"GOMAXPROCS": 8, "gc": 0},
                                 "noise": 0.02, "state_file": "world.json"}},
        "parameters": [
            {"name": "GOMAXPROCS", "type": "int", "values": [1, 2, 4, 8, 16]},
            {"name": "gc", "env": "FORCEGC_INTERVAL_MS", "type": "int",
             "values": [0, 500, 2000, 10000]},
        ],
        "baseline": {"repeats": 3, "params": {"GOMAXPROCS": None, "gc": 0}},
        "chaos": {"stress": {"workers": 2, "load": 50}},
        "measure": {"warmup": "20ms", "window": "60ms"},
        "metrics": {"p99": "surface"},
        "objective": {"minimize": "p99"},
        "study": {"trials": 6, "sampler": "tpe", "seed": 5, **study},
    }


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def cli(cwd: Path, *args: str, env: dict[str, str] | None = None,
        timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=cwd,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(argv: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; CI and our machines run tests as root.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    for tool in ("initdb", "pg_ctl"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not on PATH: install PostgreSQL's server binaries")
    # Not under pytest's tmp dir: that is private to root, and the server runs as postgres.
    base = Path(tempfile.mkdtemp(prefix="autotune-pg-nightly-"))
    base.chmod(0o777)
    data = base / "data"
    port = _free_port()
    subprocess.run(_as_postgres(["initdb", "-D", str(data), "-U", "autotune", "--auth=trust",
                                 "-E", "UTF8"]), check=True, capture_output=True, text=True)
    subprocess.run(_as_postgres(["pg_ctl", "-D", str(data), "-w", "-l", str(data / "log"),
                                 "-o", f"-h 127.0.0.1 -p {port} -k {data}", "start"]),
                   check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg2://autotune@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_postgres(["pg_ctl", "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
