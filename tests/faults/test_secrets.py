"""Secrets (the Prometheus bearer token, the PostgreSQL password) are used, and never written:
not in logs, stdout/stderr, trials.jsonl, the study's storage (user and system attrs included),
reports, exports or error messages. Each test also checks the secret was really used, so that it
cannot pass by never sending it.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
import yaml

from autotune import backends as registry
from autotune import simulated
from autotune.cli import main
from autotune.clock import Clock, SystemClock
from autotune.errors import MetricsError
from autotune.experiment import Experiment
from autotune.experiment.models import Prometheus
from autotune.live import Live, Matcher, Window
from autotune.local.ports import free_port
from autotune.metrics.base import Unavailable
from autotune.metrics.prometheus import PrometheusSource
from autotune.study.trial import Backends
from tests.faults.prom_proxy import PromProxy

pytestmark = pytest.mark.faults

TOKEN = "tok-6f1d2c9a-secret"
PASSWORD = "pw-91be4c-secret"
AUTOTUNE = str(Path(sys.executable).with_name("autotune"))


def _experiment(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "secrets",
        "target": {"simulated": {"optimum": {"GOMAXPROCS": 2, "gc": 500},
                                 "unset": {"GOMAXPROCS": 8, "gc": 0}}},
        "parameters": [{"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 8},
                       {"name": "gc", "env": "FORCEGC_INTERVAL_MS", "type": "int",
                        "values": [0, 500, 2000]}],
        "baseline": {"repeats": 1, "params": {"GOMAXPROCS": None, "gc": 0}},
        "chaos": {"stress": {"workers": 1, "load": 10}},
        "measure": {"warmup": "50ms", "window": "100ms"},
        "metrics": {"p99": "surface", "stress": "stress"},
        "objective": {"minimize": "p99"},
        "study": {"trials": 2, "sampler": "random", "seed": 1},
    }
    doc.update(changes)
    return doc


def _leaks(secret: str, root: Path, *texts: str) -> list[str]:
    """Where ``secret`` appears: among ``texts`` (by index), or in a file under ``root`` (an
    SQLite database is dumped as SQL first, so every attr of every trial is searched)."""
    found = [f"text #{i}" for i, text in enumerate(texts) if secret in text]
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if data.startswith(b"SQLite format 3"):
            with sqlite3.connect(path) as db:
                data = "\n".join(db.iterdump()).encode()
        if secret.encode() in data:
            found.append(str(path.relative_to(root)))
    return found


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out + out.err


# --- the Prometheus bearer token -----------------------------------------------------------------

def _with_prometheus(exp: Experiment, results: Path, clock: Clock,
                     context: str | None, preflight: bool) -> Backends:
    """The simulated target and injector, with metrics from the real Prometheus (through the
    registry the CLI builds backends from)."""
    world = simulated.World(simulated.world_path(exp, results))
    return Backends(target=simulated.SimulatedService(exp, world, clock),
                    injector=simulated.SimulatedInjector(world, clock),
                    source=PrometheusSource(exp.prometheus, clock))


@pytest.mark.integration
def test_the_token_is_sent_and_written_nowhere(
        prom_proxy: PromProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOTUNE_FAULTS_TOKEN", TOKEN)
    monkeypatch.setitem(registry.REGISTRY, "simulated", _with_prometheus)
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(_experiment(
        prometheus={"url": prom_proxy.url, "token_env": "AUTOTUNE_FAULTS_TOKEN",
                    "scrape_interval": "0.2s", "timeout": "0.5s"},
        measure={"warmup": "0.2s", "window": "1s"},
        metrics={"p99": "sum(rate(fault_requests_total{ {{selector}} }[{{window}}]))",
                 # diagnostics that fail, so that reasons are written too
                 "missing": "absent_metric{ {{selector}} }",
                 "rejected": "sum(fault_gauge{ {{selector}} })"},
    )))
    prom_proxy.set("5xx", match="fault_gauge")  # a 503 whose body is recorded with the reason
    outputs = []
    for argv in (["-v", "run", str(path), "--plain", "--top", "1", "--repeats", "1",
                  "--extra", "0"],
                 ["status", str(path), "--json"], ["report", str(path)],
                 ["export", str(path), "--format", "json", "--force"]):
        code, out = _cli(argv, capsys)
        assert code == 0, out
        outputs.append(out)
    outputs.append(caplog.text)

    sent = prom_proxy.authorizations()
    assert sent and all(a == f"Bearer {TOKEN}" for a in sent), "every query carried the token"
    journal = (tmp_path / "results" / "secrets" / "trials.jsonl").read_text()
    assert "503" in journal and "no series" in journal, "the failures' reasons were recorded"
    assert (tmp_path / "results" / "secrets" / "report.html").exists()
    assert _leaks(TOKEN, tmp_path, *outputs) == []


SCOPE = (Matcher("job", "simulated"),)


@pytest.mark.integration
def test_a_token_with_a_trailing_newline_is_used_and_not_leaked(
        prom_proxy: PromProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    # What `kubectl create secret --from-file` of an `echo`ed file puts in an env var.
    monkeypatch.setenv("AUTOTUNE_FAULTS_TOKEN", TOKEN + "\n")
    config = Prometheus(url=prom_proxy.url, token_env="AUTOTUNE_FAULTS_TOKEN",
                        scrape_interval=0.2, timeout=0.5)
    source = PrometheusSource(config, SystemClock())
    try:
        source.learn_interval(SCOPE)
    except MetricsError as e:
        assert TOKEN not in str(e), str(e)
        raise
    end = time.time()
    query = "sum(rate(fault_requests_total{job=\"simulated\"}[1s]))"
    reading = source.read({"m": query}, Window(end - 1, end),
                          Live(env={}, since=end - 2, scope=SCOPE))["m"]
    assert not isinstance(reading, Unavailable), reading.reason
    assert prom_proxy.authorizations()[-1] == f"Bearer {TOKEN}"


# --- the PostgreSQL password ---------------------------------------------------------------------

def _run_cli(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """The installed ``autotune``, as a user runs it: its real stdout, stderr and logging."""
    done = subprocess.run([AUTOTUNE, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})
    return done.returncode, done.stdout + done.stderr


def test_a_database_password_is_not_in_any_failure(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(_experiment()))
    closed = f"postgresql+psycopg2://autotune:{PASSWORD}@127.0.0.1:{free_port()}/autotune"
    cases = [
        (["run", str(path), "--plain", "--storage", closed], {}),
        (["status", str(path), "--storage", closed], {}),
        (["report", str(path), "--storage", closed], {}),
        (["export", str(path), "--format", "env", "--storage", closed], {}),
        (["confirm", str(path), "--plain", "--storage", closed], {}),
        (["run", str(path), "--plain"], {"AUTOTUNE_STORAGE": closed}),
        # Not a port; no driver for the dialect (SQLAlchemy 2.1's postgresql:// is psycopg 3)
        (["run", str(path), "--storage", closed.replace(closed.rsplit(":", 1)[1], "x/db")],
         {}),
        (["run", str(path), "--storage", closed.replace("+psycopg2", "")], {}),
    ]
    outputs = []
    for argv, env in cases:
        code, out = _run_cli(argv, tmp_path, env)
        assert code == 1, out
        assert "cannot open the study storage" in out and "autotune:***@" in out, out
        outputs.append(out)
    assert _leaks(PASSWORD, tmp_path, *outputs) == []


def test_a_database_password_in_the_url_query_is_not_in_the_failure(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(_experiment()))
    url = f"postgresql+psycopg2://autotune@127.0.0.1:{free_port()}/db?password={PASSWORD}"
    code, out = _run_cli(["run", str(path), "--storage", url], tmp_path)
    assert code == 1 and "cannot open the study storage" in out, out
    assert PASSWORD not in out


def _as_postgres(argv: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; CI and our machines run tests as root.
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@pytest.fixture(scope="module")
def postgres_with_password() -> Iterator[tuple[str, int]]:
    """A PostgreSQL server that checks passwords (scram-sha-256): (superuser, port)."""
    for tool in ("initdb", "pg_ctl"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not on PATH: install PostgreSQL's server binaries")
    # Not under pytest's tmp dir: that is private to root, and the server runs as postgres.
    base = Path(tempfile.mkdtemp(prefix="autotune-pg-secrets-"))
    base.chmod(0o777)
    data, pwfile = base / "data", base / "pw"
    pwfile.write_text(PASSWORD + "\n")
    pwfile.chmod(0o644)
    port = free_port()
    subprocess.run(_as_postgres(["initdb", "-D", str(data), "-U", "autotune", "-E", "UTF8",
                                 "--auth=scram-sha-256", f"--pwfile={pwfile}"]),
                   check=True, capture_output=True, text=True)
    pwfile.unlink()
    subprocess.run(_as_postgres(["pg_ctl", "-D", str(data), "-w", "-l", str(data / "log"),
                                 "-o", f"-h 127.0.0.1 -p {port} -k {data}", "start"]),
                   check=True, capture_output=True)
    try:
        yield "autotune", port
    finally:
        subprocess.run(_as_postgres(["pg_ctl", "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _dump(url: str) -> str:
    """Every row of every table of the study storage, as text."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as db:
            tables = sqlalchemy.inspect(db).get_table_names()
            rows = [f"{t}: {row}" for t in tables
                    for row in db.execute(sqlalchemy.text(f'SELECT * FROM "{t}"'))]
    finally:
        engine.dispose()
    return "\n".join(rows)


@pytest.mark.integration
def test_a_run_on_postgresql_with_a_password_writes_it_nowhere(
        postgres_with_password: tuple[str, int], tmp_path: Path) -> None:
    user, port = postgres_with_password
    url = f"postgresql+psycopg2://{user}:{PASSWORD}@127.0.0.1:{port}/postgres"
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(_experiment()))
    outputs = []
    for argv in (["-v", "run", str(path), "--plain", "--storage", url, "--top", "1",
                  "--repeats", "1", "--extra", "0"],
                 ["status", str(path), "--storage", url, "--json"],
                 ["report", str(path), "--storage", url],
                 ["export", str(path), "--format", "json", "--force", "--storage", url]):
        code, out = _run_cli(argv, tmp_path)
        assert code == 0, out
        outputs.append(out)
    wrong = url.replace(PASSWORD, "not-the-password")
    code, out = _run_cli(["status", str(path), "--storage", wrong], tmp_path)
    assert code == 1 and "password authentication failed" in out, out
    outputs.append(out)

    dump = _dump(url)
    assert "COMPLETE" in dump, "the study is in PostgreSQL: the password worked"
    assert (tmp_path / "results" / "secrets" / "report.md").exists()
    assert _leaks(PASSWORD, tmp_path, *outputs, dump) == []
