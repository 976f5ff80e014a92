"""Shared by the nightly tests: a simulated experiment file, the CLI as a process, and a real
PostgreSQL server (tests/support/postgres.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.nightly import nightly_experiment
from tests.support.postgres import postgres_server

ROOT = Path(__file__).resolve().parents[2]


def simulated_doc(**study: Any) -> dict[str, Any]:
    """A small simulated experiment: the optimum far from the baseline (unset = 8, gc off)."""
    return nightly_experiment(**study)


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def cli(cwd: Path, *args: str, env: dict[str, str] | None = None,
        timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=cwd,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with postgres_server(prefix="autotune-pg-nightly-") as server:
        yield server.url()
