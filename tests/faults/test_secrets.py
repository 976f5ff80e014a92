"""Secrets are used, and never written. Each secret-bearing field gets a canary: the user and
password in ``prometheus.url``, ``prometheus.headers`` values, the bearer token of ``token_env``
and of ``token_file``, the storage URL's password (well-formed and malformed URLs, ``?password=``,
``sslpassword=``), and a local target's load headers and body. Every command runs with it
(``run``, ``confirm``, ``report``, ``export``, ``history``, ``status --json``, ``validate
--live``, ``cleanup``, with ``-v`` logs), and the canary is searched for in every output, every
log line, every file written (an SQLite study dumped as SQL; PostgreSQL's rows) and, while a local
run runs, the process table (``/proc/*/cmdline`` and ``/proc/*/environ`` of every process but
autotune itself): nowhere. Each test also checks that the secret was really used, so that it
cannot pass by never sending it.

The canaries get a random part per session: the process table is the machine's, and another run
of this suite may be on it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import secrets
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
import yaml

from autotune import backends as registry
from autotune.cli import main
from autotune.clock import Clock, SystemClock
from autotune.errors import MetricsError
from autotune.experiment import Experiment
from autotune.experiment.models import Prometheus
from autotune.live import Live, Matcher, Window
from autotune.metrics.base import Unavailable
from autotune.metrics.prometheus import PrometheusSource
from autotune.platforms import simulated
from autotune.platforms.kubernetes import stack as cluster
from autotune.platforms.local.ports import free_port
from autotune.study.trial import Backends
from tests.faults.prom_proxy import PrometheusProcess, PromProxy
from tests.support.postgres import postgres_server

pytestmark = pytest.mark.faults

_RUN = secrets.token_hex(3)
TOKEN = f"tok-{_RUN}-6f1d2c9a-secret"
PASSWORD = f"pw-{_RUN}-91be4c-secret"
URL_SECRET = f"url-{_RUN}-5c0e7a-secret"
HEADER_SECRET = f"hdr-{_RUN}-3a9f21-secret"
FILE_SECRET = f"file-{_RUN}-7d44b0-secret"
LOAD_SECRET = f"load-{_RUN}-e81c55-secret"
BODY_SECRET = f"body-{_RUN}-0b7f3e-secret"
PATH_SECRET = f"path-{_RUN}-a4c9d1-secret"
"""In the load's path, as a query: ``?api_key=...`` (review finding: it was the load
generator's argument, and in its log)."""
BASIC = base64.b64encode(f"autotune:{URL_SECRET}".encode()).decode()
"""The URL's user and password as an Authorization header carries them: no less a leak."""
CANARIES = (TOKEN, PASSWORD, URL_SECRET, HEADER_SECRET, FILE_SECRET, LOAD_SECRET, BODY_SECRET,
            PATH_SECRET, BASIC)
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


def _leaks(canaries: Sequence[str], root: Path, *texts: str) -> list[str]:
    """Where any of ``canaries`` appears: among ``texts`` (by index), or in a file under
    ``root`` (an SQLite database is dumped as SQL first, so every attr of every trial is
    searched)."""
    found = [f"text #{i}: {c}" for i, text in enumerate(texts) for c in canaries if c in text]
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if data.startswith(b"SQLite format 3"):
            with sqlite3.connect(path) as db:
                data = "\n".join(db.iterdump()).encode()
        found += [f"{path.relative_to(root)}: {c}" for c in canaries if c.encode() in data]
    return found


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out + out.err


# --- Prometheus credentials: URL userinfo, headers, token_env, token_file ---------------------

def _with_prometheus(exp: Experiment, results: Path, clock: Clock,
                     context: str | None, preflight: bool) -> Backends:
    """The simulated target and injector, with metrics from the real Prometheus (through the
    registry the CLI builds backends from)."""
    world = simulated.World(simulated.world_path(exp, results))
    return Backends(target=simulated.SimulatedService(exp, world, clock),
                    injector=simulated.SimulatedInjector(world, clock),
                    source=PrometheusSource(exp.prometheus, clock))


SCOPE = (Matcher("job", "simulated"),)


@pytest.fixture
def front_end(prom_server: PrometheusProcess) -> Iterator[PromProxy]:
    """The test Prometheus behind a query front end (Grafana Cloud, Mimir; basic auth is their
    usual credential): ``/api/v1/targets`` and ``/api/v1/status/config`` answer 404, and
    requests' message for that 404 quotes the whole URL asked."""
    with PromProxy(prom_server.url, hidden=("/api/v1/targets", "/api/v1/status/config")) as proxy:
        yield proxy


class _RunningService:
    """``validate --live``'s view of a Deployment, without a cluster: the test Prometheus's job
    ``simulated`` is the running service."""

    def current(self) -> Live:
        return Live(env={}, since=time.time() - 10, scope=SCOPE)


def _credentials(kind: str, url: str, token_file: Path) -> tuple[dict[str, Any], str]:
    """``prometheus`` of the experiment with this kind of credential, and the Authorization
    header Prometheus must get."""
    config: dict[str, Any] = {"url": url, "scrape_interval": "0.2s", "timeout": "0.5s",
                              "headers": {"X-Scope-OrgID": HEADER_SECRET}}
    if kind == "userinfo":
        config["url"] = url.replace("http://", f"http://autotune:{URL_SECRET}@")
        return config, f"Basic {BASIC}"
    if kind == "token_env":
        return {**config, "token_env": "AUTOTUNE_FAULTS_TOKEN"}, f"Bearer {TOKEN}"
    if kind == "token_file":
        token_file.write_text(FILE_SECRET + "\n")
        return {**config, "token_file": str(token_file)}, f"Bearer {FILE_SECRET}"
    assert kind == "header"
    config["headers"] = {"Authorization": f"Bearer {HEADER_SECRET}"}
    return config, f"Bearer {HEADER_SECRET}"


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["userinfo", "token_env", "token_file", "header"])
def test_prometheus_credentials_are_sent_and_written_nowhere(
        kind: str, front_end: PromProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("AUTOTUNE_FAULTS_TOKEN", TOKEN)
    monkeypatch.setitem(registry.REGISTRY, "simulated", _with_prometheus)
    monkeypatch.setattr(cluster, "_kube", lambda *args: None)
    monkeypatch.setattr(cluster, "_parts", lambda *args: (_RunningService(), None))
    caplog.set_level(logging.DEBUG)
    # Outside the searched directory, like the experiment: they hold the secrets.
    prometheus, authorization = _credentials(kind, front_end.url, tmp_path / "token")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(_experiment(
        prometheus=prometheus,
        measure={"warmup": "0.2s", "window": "1s"},
        metrics={"p99": "sum(rate(fault_requests_total{ {{selector}} }[{{window}}]))",
                 # diagnostics that fail, so that reasons are written too
                 "missing": "absent_metric{ {{selector}} }",
                 "rejected": "sum(fault_gauge{ {{selector}} })"},
    )))
    front_end.set("5xx", match="fault_gauge")  # a 503 whose body is recorded with the reason
    confirm = ["--plain", "--top", "1", "--repeats", "1", "--extra", "0"]
    outputs = []
    for argv, expected in ((["-v", "run", str(path), *confirm], 0),
                           (["-v", "confirm", str(path), *confirm], 0),
                           (["status", str(path), "--json"], 0), (["report", str(path)], 0),
                           (["export", str(path), "--format", "json", "--force"], 0),
                           (["history", str(path)], 0),
                           # the failing diagnostics are its problems
                           (["-v", "validate", str(path), "--live"], 1),
                           (["-v", "cleanup", str(path)], 0)):
        code, out = _cli(argv, capsys)
        assert code == expected, out
        outputs.append(out)
    outputs.append(caplog.text)

    sent = front_end.authorizations()
    assert sent and all(a == authorization for a in sent), "every query carried the credential"
    assert "404 Client Error" in caplog.text, "the front end's 404s were logged"
    journal = (work / "results" / "secrets" / "trials.jsonl").read_text()
    assert "503" in journal and "no series" in journal, "the failures' reasons were recorded"
    assert "metrics.rejected" in outputs[6] and "503" in outputs[6], outputs[6]
    assert (work / "results" / "secrets" / "report.html").exists()
    assert _leaks(CANARIES, work, *outputs) == []


@pytest.mark.parametrize("url", [
    f"autotune:{URL_SECRET}@127.0.0.1:9090",           # no scheme
    f"http//autotune:{URL_SECRET}@127.0.0.1:9090",     # the ':' forgotten
    f"http://autotune:{URL_SECRET}/x@127.0.0.1:9090",  # a '/' in the password, not encoded
])
def test_a_malformed_prometheus_url_is_refused_without_its_password(
        url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(_experiment(prometheus={"url": url})))
    outputs = []
    for argv in (["validate", str(path), "--live"], ["-v", "run", str(path), "--plain"],
                 ["status", str(path), "--json"], ["cleanup", str(path)]):
        code, out = _cli(argv, capsys)
        assert code == 1 and "prometheus.url: " in out, out
        outputs.append(out)
    assert _leaks(CANARIES, work, *outputs) == []


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


# --- the local target: load headers and body, the children's argv and environment -------------

SERVICE = r'''
"""A service that answers 200 only to a request with the expected X-Api-Key header, body and
path, given as SHA-256 digests (so that its own argv holds no canary), and counts both
outcomes."""
import hashlib
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, header_digest, body_digest, path_digest = (int(sys.argv[1]), sys.argv[2], sys.argv[3],
                                                 sys.argv[4])
counts = {"yes": 0, "no": 0}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/healthz":
            return self.send(200, "ok")
        if self.path == "/metrics":
            with lock:
                now = dict(counts)
            return self.send(200, "# TYPE canary_requests_total counter\n" + "".join(
                f'canary_requests_total{{match="{k}"}} {v}\n' for k, v in now.items()))
        self.send(404, "")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = (self.headers.get("X-Api-Key") or "").encode()
        ok = (hashlib.sha256(key).hexdigest() == header_digest
              and hashlib.sha256(body).hexdigest() == body_digest
              and hashlib.sha256(self.path.encode()).hexdigest() == path_digest)
        with lock:
            counts["yes" if ok else "no"] += 1
        self.send(200 if ok else 403, "")


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Hit:
    pid: int
    where: str  # cmdline or environ
    argv: str
    canaries: list[str]


@dataclass
class ProcessTable:
    """What a scan of ``/proc`` found while a command ran."""

    hits: dict[tuple[int, str], Hit]
    seen: set[str]  # which of our children were seen running (service, loadgen)


def _scan(table: ProcessTable, skip: set[int], script: Path, forked: bytes = b"") -> None:
    """``forked``: autotune's own command line. A child between fork() and exec() still shows
    its parent's command line and environment (exec replaces both), so a process with exactly
    autotune's command line is autotune starting a child, not a child that kept a secret (CI
    caught one such moment)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if forked and argv == forked:
            continue
        whole = argv.replace(b"\0", b" ").decode(errors="replace")
        shown = whole[:200]
        if str(script) in whole:
            table.seen.add("service")
        elif "-max-duration" in whole and "-listen" in whole:
            table.seen.add("loadgen")
        for where in ("cmdline", "environ"):
            try:
                data = argv if where == "cmdline" else (entry / where).read_bytes()
            except OSError:
                continue
            found = [c for c in CANARIES if c.encode() in data]
            if found:
                table.hits.setdefault((int(entry.name), where),
                                      Hit(int(entry.name), where, shown, found))


def _run_watched(argv: list[str], cwd: Path, env: dict[str, str], log: Path,
                 table: ProcessTable, script: Path) -> int:
    """The installed ``autotune``, its output in ``log``; every other process scanned for the
    canaries while it runs. Autotune itself is not scanned: its environment holds what it was
    given (the storage URL, the token variable)."""
    with log.open("ab") as out:
        run = subprocess.Popen([AUTOTUNE, *argv], cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                               env={**os.environ, **env})
        deadline = time.monotonic() + 300
        # Autotune's own command line once exec() is done: read at once after Popen, /proc
        # may still show this test's (the child between fork and exec; CI caught it).
        forked = b""
        while run.poll() is None and time.monotonic() < deadline:
            try:
                forked = Path(f"/proc/{run.pid}/cmdline").read_bytes()
            except OSError:
                break
            if str(AUTOTUNE).encode() in forked:
                break
            time.sleep(0.005)
        while run.poll() is None:
            if time.monotonic() > deadline:
                run.kill()
                raise AssertionError(f"{argv} did not finish in 300 s")
            _scan(table, {run.pid, os.getpid()}, script, forked)
            time.sleep(0.2)
    return run.returncode


@pytest.mark.integration
def test_a_local_run_writes_no_secret_and_no_child_gets_one(tmp_path: Path) -> None:
    given, work = tmp_path / "given", tmp_path / "work"  # what it reads, where it writes
    given.mkdir()
    work.mkdir()
    script = given / "service.py"
    script.write_text(SERVICE)
    body = f'{{"query": "x", "password": "{BODY_SECRET}"}}'
    load_path = f"/submit?api_key={PATH_SECRET}"
    doc = _experiment(
        name="secrets-local",
        target={"local": {
            "command": [sys.executable, str(script), "{port}", _sha256(LOAD_SECRET),
                        _sha256(body), _sha256(load_path)],
            "health": "/healthz", "metrics_path": "/metrics", "cpus": 1.0,
            "load": {"rate": 20, "method": "POST", "body": body, "connections": 4,
                     "path": load_path,
                     "headers": {"X-Api-Key": LOAD_SECRET, "Content-Type": "application/json"}},
        }},
        parameters=[{"name": "GOMAXPROCS", "type": "int", "values": [1, 2]}],
        baseline={"repeats": 1, "params": {"GOMAXPROCS": None}},
        measure={"warmup": "1s", "window": "2s", "noise_guard": {"enabled": False}},
        # Our private Prometheus gets the token too (unused); its variable is the point here.
        prometheus={"scrape_interval": "0.5s", "token_env": "FAULTS_PROM_TOKEN"},
        metrics={
            "p99": "histogram_quantile(0.99, sum by (le) (rate("
                   "loadgen_request_duration_seconds_bucket{ {{selector}} }[{{window}}])))",
            "matched": 'sum(rate(canary_requests_total{ {{selector}}, match="yes" }[{{window}}]))',
            "refused": 'sum(rate(canary_requests_total{ {{selector}}, match="no" }[{{window}}]))',
        },
        study={"trials": 1, "sampler": "random", "seed": 1},
    )
    path = given / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    # What a CronJob's Secrets put in autotune's environment; --storage wins over the variable.
    env = {"AUTOTUNE_STORAGE": f"postgresql+psycopg2://autotune:{PASSWORD}@127.0.0.1:1/db",
           "FAULTS_PROM_TOKEN": TOKEN,
           # libpq's password variable, as a CronJob's Secret may set it for the storage.
           "PGPASSWORD": PASSWORD}
    storage = ["--storage", "sqlite:///results/secrets-local/study.db"]
    confirm = ["--plain", "--top", "1", "--repeats", "1", "--extra", "0"]
    table = ProcessTable({}, set())
    log = work / "autotune.log"  # searched below, as every file written
    for argv in (["-v", "run", str(path), *storage, *confirm],
                 ["-v", "confirm", str(path), *storage, *confirm],
                 ["status", str(path), *storage, "--json"], ["report", str(path), *storage],
                 ["export", str(path), *storage, "--format", "env", "--force"],
                 ["history", str(path), *storage], ["-v", "cleanup", str(path)]):
        code = _run_watched(argv, work, env, log, table, script)
        assert code == 0, log.read_text()[-3000:]

    assert table.seen == {"service", "loadgen"}, "the children were scanned while they ran"
    results = work / "results" / "secrets-local"
    records = [json.loads(line) for line in (results / "trials.jsonl").read_text().splitlines()]
    complete = [r for r in records if r["state"] == "COMPLETE"]
    assert len(complete) >= 3, [r.get("failure") for r in records]
    for r in complete:  # the header and the body were sent, and right
        assert r["metrics"]["matched"] > 10 and r["metrics"]["refused"] == 0, r["metrics"]
    assert (results / "report.md").exists()
    # In no file; and no argv, nor the environment of the service or the load generator.
    ours = [h for h in table.hits.values()
            if h.where == "cmdline" or str(script) in h.argv or "-max-duration" in h.argv]
    problems = _leaks(CANARIES, work) + [f"{h.where} of pid {h.pid} ({h.argv}): {h.canaries}"
                                         for h in ours]
    assert problems == [], "\n".join(problems)
    # Autotune's other tools (its Prometheus, stress-ng) get redaction.tool_env() only.
    assert not table.hits, f"a tool of autotune inherited a secret: {list(table.hits.values())}"


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
    at = "127.0.0.1/autotune"
    cases = [
        (["run", str(path), "--plain", "--storage", closed], {}),
        (["status", str(path), "--storage", closed], {}),
        (["status", str(path), "--json", "--storage", closed], {}),
        (["report", str(path), "--storage", closed], {}),
        (["export", str(path), "--format", "env", "--storage", closed], {}),
        (["confirm", str(path), "--plain", "--storage", closed], {}),
        (["history", str(path), "--storage", closed], {}),
        (["run", str(path), "--plain"], {"AUTOTUNE_STORAGE": closed}),
        # Not a port; no driver for the dialect (SQLAlchemy 2.1's postgresql:// is psycopg 3)
        (["run", str(path), "--storage", closed.replace(closed.rsplit(":", 1)[1], "x/db")],
         {}),
        (["run", str(path), "--storage", closed.replace("+psycopg2", "")], {}),
        # Malformed: SQLAlchemy refuses them with the URL next to its words
        (["run", str(path), "--storage", f"postgresql//autotune:{PASSWORD}@{at}"], {}),
        (["status", str(path), "--storage", f"autotune:{PASSWORD}@{at}"], {}),
        (["history", str(path)], {"AUTOTUNE_STORAGE": f"postgresql:/autotune:{PASSWORD}@{at}"}),
        # '@' and '/' in the password, not percent-encoded: the host is cut out of it
        (["run", str(path), "--storage", closed.replace(PASSWORD, f"x@{PASSWORD}")], {}),
        (["run", str(path), "--storage", closed.replace(PASSWORD, f"{PASSWORD}/x")], {}),
    ]
    outputs = []
    for argv, env in cases:
        code, out = _run_cli(argv, tmp_path, env)
        assert code == 1, out
        assert "cannot open the study storage" in out and "autotune:***@" in out, out
        outputs.append(out)
    assert _leaks([PASSWORD], tmp_path, *outputs) == []


@pytest.mark.parametrize("query", ["password", "sslpassword", "PASSWORD"])
def test_a_database_password_in_the_url_query_is_not_in_the_failure(
        query: str, tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(_experiment()))
    url = f"postgresql+psycopg2://autotune@127.0.0.1:{free_port()}/db?{query}={PASSWORD}"
    code, out = _run_cli(["run", str(path), "--storage", url], tmp_path)
    assert code == 1 and "cannot open the study storage" in out, out
    assert f"{query}=***" in out and PASSWORD not in out, out


@pytest.fixture(scope="module")
def postgres_with_password() -> Iterator[tuple[str, int]]:
    """A PostgreSQL server that checks passwords (scram-sha-256): (superuser, port)."""
    with postgres_server(prefix="autotune-pg-secrets-", password=PASSWORD) as server:
        yield server.user, server.port


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
    confirm = ["--plain", "--top", "1", "--repeats", "1", "--extra", "0"]
    outputs = []
    for argv, env in ((["-v", "run", str(path), "--storage", url, *confirm], {}),
                      (["-v", "confirm", str(path), *confirm], {"AUTOTUNE_STORAGE": url}),
                      (["status", str(path), "--storage", url, "--json"], {}),
                      (["report", str(path), "--storage", url], {}),
                      (["export", str(path), "--format", "json", "--force", "--storage", url],
                       {}),
                      (["history", str(path)], {"AUTOTUNE_STORAGE": url}),
                      (["-v", "cleanup", str(path)], {"AUTOTUNE_STORAGE": url})):
        code, out = _run_cli(argv, tmp_path, env)
        assert code == 0, out
        outputs.append(out)
    wrong = url.replace(PASSWORD, "not-the-password")
    code, out = _run_cli(["status", str(path), "--storage", wrong], tmp_path)
    assert code == 1 and "password authentication failed" in out, out
    outputs.append(out)

    dump = _dump(url)
    assert "COMPLETE" in dump, "the study is in PostgreSQL: the password worked"
    assert (tmp_path / "results" / "secrets" / "report.md").exists()
    assert _leaks([PASSWORD], tmp_path, *outputs, dump) == []
