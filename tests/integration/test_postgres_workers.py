"""Several workers share one study through a real PostgreSQL server (each has its own target)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

pytestmark = pytest.mark.integration


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
    base = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
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


def _experiment(tmp: Path, worker: int) -> Path:
    doc = {
        "name": "shared",
        "target": {"simulated": {"optimum": {"GOMAXPROCS": 2}, "unset": {"GOMAXPROCS": 8},
                                 "state_file": f"world-{worker}.json"}},
        "parameters": [{"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 16}],
        "baseline": {"repeats": 2},
        "chaos": {"stress": {"workers": 1, "load": 50}},
        "measure": {"warmup": "50ms", "window": "300ms"},
        "metrics": {"p99": "surface"},
        "objective": {"minimize": "p99"},
        "study": {"trials": 8, "sampler": "tpe", "seed": worker},
    }
    path = tmp / f"exp-{worker}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_two_workers_share_one_study(tmp_path: Path, postgres_url: str) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-m", "autotune.cli", "run",
                          str(_experiment(tmp_path, w)), "--storage", postgres_url, "--plain"],
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for w in (1, 2)
    ]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "autotune@127.0.0.1" in outs[0] and "***" not in outs[0]  # no password to hide
    study = optuna.load_study(study_name="shared", storage=postgres_url)
    trials = study.get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    # Both workers count the same budget; at most one trial per extra worker overshoots it.
    assert 8 <= len(complete) <= 9
    workers = {t.user_attrs["worker"]["pid"] for t in trials}
    assert len(workers) == 2, "both workers ran trials"
    assert len({t.number for t in trials}) == len(trials)
    reference = optuna.load_study(study_name="shared:reference", storage=postgres_url)
    assert len([t for t in reference.get_trials() if t.state == TrialState.COMPLETE]) >= 2
