"""A fault-injecting HTTP proxy in front of a real Prometheus, the tiny exporter that Prometheus
scrapes, and the Prometheus process itself (a static scrape config: scraped from the first second,
without the 5-10 s service-discovery ticks of file_sd).

The proxy's modes, each what a real deployment produces somewhere:

- ``pass``: forward unchanged (and record what was asked, with which Authorization header);
- ``down``: the listening socket is closed: connection refused (Prometheus restarting);
- ``slow``: answer only after ``slow_seconds``, past any client timeout (an overloaded server);
- ``5xx``: ``503`` with a body, like an ingress whose backend is gone;
- ``nan``: every sample value becomes ``NaN`` (``rate()`` of an idle histogram);
- ``empty``: an empty result (a metric name or label that does not exist);
- ``several``: two series where the query had one (two replicas scraped, a missing ``sum``);
- ``stale``: the query is evaluated ``stale_seconds`` before the ``time`` asked for, as a lagging
  replica or a query-result cache keyed on the query text would answer. Prometheus sets an instant
  vector's sample timestamp to the evaluation time, so a client can tell: the timestamp of what
  came back is not the ``time=`` it asked for. Nothing else in the answer differs.

``match``: a fault applies only to queries containing this text (e.g. the metric name), so the
source's own bookkeeping queries (``timestamp(up{...})``) still pass; ``None``: every request.

``hidden``: API paths answered ``404`` whatever the mode, as a query front end answers the
endpoints it does not serve (Thanos Query, Mimir, the managed services have no
``/api/v1/status/config``, most no ``/api/v1/targets``).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer as _ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import requests

from autotune.platforms.local import proc
from autotune.platforms.local.ports import free_port

MODES = ("pass", "down", "slow", "5xx", "nan", "empty", "several", "stale")
UNAVAILABLE_BODY = b"503 Service Unavailable: no healthy upstream (injected by prom_proxy)"
NOT_FOUND_BODY = b"404 page not found"


class ThreadingHTTPServer(_ThreadingHTTPServer):
    """A client that hangs up mid-answer (autotune's deadline watchdog shuts its socket down on
    purpose) is no error of the proxy's: socketserver would print its traceback to stderr,
    into whichever test runs at that moment (CI caught one in a test that checks stderr)."""

    def handle_error(self, request: object, client_address: object) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Seen:
    """One request the proxy received."""

    method: str
    path: str
    params: dict[str, str]
    authorization: str | None
    fault: str  # the mode applied to it ("pass" when it did not match)


class PromProxy:
    """``with PromProxy(upstream) as proxy: proxy.set("nan", match="my_metric")``."""

    def __init__(self, upstream: str, *, slow_seconds: float = 5.0,
                 stale_seconds: float = 30.0, hidden: Sequence[str] = ()) -> None:
        self.upstream = upstream.rstrip("/")
        self.slow_seconds, self.stale_seconds = slow_seconds, stale_seconds
        self.hidden = frozenset(hidden)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.mode: str = "pass"
        self.match: str | None = None
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()  # releases slow answers at a mode change or stop
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> str:
        self._listen()
        return self.url

    def stop(self) -> None:
        self._wake.set()
        self._close()

    def __enter__(self) -> PromProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def listening(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _listen(self) -> None:
        if self._server is not None:
            return
        proxy = self

        class Handler(_Handler):
            owner = proxy

        # HTTPServer sets SO_REUSEADDR: the port closed by ``down`` can be bound again at once.
        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = False  # server_close() joins the handlers: a clean stop
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name=f"prom-proxy-{self.port}", daemon=True)
        self._thread.start()

    def _close(self) -> None:
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is None or thread is None:
            return
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        if thread.is_alive():
            raise RuntimeError(f"{thread.name} did not stop")

    # --- faults --------------------------------------------------------------------------

    def set(self, mode: str, *, match: str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
        if mode == "down" and match is not None:
            raise ValueError("down refuses every connection: it cannot match a query")
        self._wake.set()  # answers held by a previous ``slow`` go out now
        self._wake = threading.Event()
        with self._lock:
            self.mode, self.match = mode, match
        if mode == "down":
            self._close()
        else:
            self._listen()

    @contextmanager
    def fault(self, mode: str, *, match: str | None = None) -> Iterator[None]:
        self.set(mode, match=match)
        try:
            yield
        finally:
            self.set("pass")

    def _applies(self, params: dict[str, str]) -> str:
        with self._lock:
            mode, match = self.mode, self.match
        if match is not None and match not in params.get("query", ""):
            return "pass"
        return mode

    def authorizations(self) -> list[str | None]:
        with self._lock:
            return [s.authorization for s in self.seen]

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)


class _Handler(BaseHTTPRequestHandler):
    owner: PromProxy
    # HTTP/1.0: one request per connection, so ``down`` refuses the very next request and
    # stopping never waits on a client's idle keep-alive connection.
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        self._proxy()

    def do_POST(self) -> None:
        self._proxy()

    def _proxy(self) -> None:
        proxy = self.owner
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if body and "form-urlencoded" in (self.headers.get("Content-Type") or ""):
            params.update(parse_qsl(body.decode(), keep_blank_values=True))
        fault = "hidden" if url.path in proxy.hidden else proxy._applies(params)
        proxy._record(Seen(self.command, url.path, params, self.headers.get("Authorization"),
                           fault))
        if fault == "hidden":
            return self._send(404, NOT_FOUND_BODY, "text/plain")
        if fault == "5xx":
            return self._send(503, UNAVAILABLE_BODY, "text/plain")
        if fault == "slow":
            proxy._wake.wait(proxy.slow_seconds)
        if fault == "stale" and "time" in params:
            params["time"] = f"{float(params['time']) - proxy.stale_seconds:.3f}"
        try:
            answer = requests.request(
                self.command, proxy.upstream + url.path, params=params, timeout=10,
                headers={k: v for k, v in self.headers.items() if k.lower() == "authorization"})
        except requests.RequestException as e:
            return self._send(502, f"upstream: {e}".encode(), "text/plain")
        content = answer.content
        rewrite = REWRITES.get(fault)
        if rewrite is not None and url.path.endswith("/query") and answer.status_code == 200:
            payload = answer.json()
            rewrite(payload["data"])
            content = json.dumps(payload).encode()
        self._send(answer.status_code, content,
                   answer.headers.get("Content-Type", "application/json"))

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (``slow``): what it saw is the point of the test


def _nan(data: dict[str, Any]) -> None:
    if data["resultType"] == "scalar":
        data["result"][1] = "NaN"
    for series in data["result"] if data["resultType"] in ("vector", "matrix") else ():
        if "value" in series:
            series["value"][1] = "NaN"
        for sample in series.get("values", []):
            sample[1] = "NaN"


def _empty(data: dict[str, Any]) -> None:
    data["resultType"], data["result"] = "vector", []


def _several(data: dict[str, Any]) -> None:
    if data["resultType"] == "scalar":
        at, value = data["result"]
        data["resultType"] = "vector"
        data["result"] = [{"metric": {}, "value": [at, value]}]
    if not data["result"]:
        data["result"] = [{"metric": {}, "value": [time.time(), "1"]}]
    first = data["result"][0]
    data["result"] = [{**first, "metric": {**first["metric"], "replica": "a"}},
                      {**first, "metric": {**first["metric"], "replica": "b"}}]


REWRITES: dict[str, Callable[[dict[str, Any]], None]] = {
    "nan": _nan, "empty": _empty, "several": _several,
}


# --- what the proxy stands in front of ----------------------------------------------------------

def escape_label_value(value: str) -> str:
    """The text exposition format's escaping of a label value."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Exporter:
    """A /metrics endpoint: ``fault_requests_total`` grows by ``rate`` a second (so its rate over
    any window is known), ``fault_gauge`` holds what the test sets, and ``hostile_info`` has one
    series per value in ``label_values``, as its ``namespace`` and ``pod`` labels (the two a
    Kubernetes candidate is selected by), exposition-escaped."""

    def __init__(self, *, rate: float = 100.0, label_values: Sequence[str] = ()) -> None:
        self.rate, self.gauge = rate, 1.0
        self.label_values = list(label_values)
        self.t0 = time.monotonic()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                body = exporter.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = False
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.02}, name="exporter",
                                        daemon=True)
        self._thread.start()

    def render(self) -> str:
        lines = ["# TYPE fault_requests_total counter",
                 f"fault_requests_total {self.rate * (time.monotonic() - self.t0):.3f}",
                 "# TYPE fault_gauge gauge", f"fault_gauge {self.gauge}",
                 "# TYPE hostile_info gauge"]
        for v in list(self.label_values):
            value = escape_label_value(v)
            lines.append(f'hostile_info{{namespace="{value}",pod="{value}"}} 1')
        return "\n".join(lines) + "\n"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class PrometheusProcess:
    """The real Prometheus binary scraping ``targets`` (job name -> host:port) every
    ``interval`` seconds, on 127.0.0.1 with a throwaway TSDB in ``workdir``; returns once every
    target has ``interval``-spaced history. ``scrape_configs``, if given, replaces the jobs made
    from ``targets`` (e.g. jobs with their own intervals and target labels), and the caller waits
    for whatever history it needs."""

    def __init__(self, workdir: Path, targets: dict[str, str], interval: float = 0.2, *,
                 scrape_configs: Sequence[dict[str, Any]] | None = None) -> None:
        self.workdir, self.interval = workdir, interval
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        every = f"{round(interval * 1000)}ms"
        jobs = ([{"job_name": job, "static_configs": [{"targets": [address]}]}
                 for job, address in targets.items()] if scrape_configs is None
                else list(scrape_configs))
        config = {
            "global": {"scrape_interval": every, "scrape_timeout": every,
                       "evaluation_interval": every},
            "scrape_configs": jobs,
        }
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(json.dumps(config))
        self.process = proc.start(
            [proc.find_binary("prometheus", "AUTOTUNE_PROMETHEUS", "prometheus"),
             f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            role="test-prometheus", log_path=workdir / "prometheus.log")
        try:
            if scrape_configs is None:
                self._await_scrapes(len(targets))
            else:
                self._await_ready()
        except BaseException:
            self.stop()
            raise

    def _await_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.process.running():
                raise RuntimeError(f"prometheus exited: {self.process.tail()}")
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"prometheus not ready within {timeout:g}s")

    def _await_scrapes(self, wanted: int, history: float = 2.0, timeout: float = 30.0) -> None:
        """Until every target has ``history`` seconds of samples (rates over windows that
        long are defined from the first test on)."""
        samples = round(history / self.interval) - 1
        query = f"count(count_over_time(up[{round(history * 1000)}ms]) >= {samples})"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.process.running():
                raise RuntimeError(f"prometheus exited: {self.process.tail()}")
            try:
                result = self.query(query)
                if result and float(result[0]["value"][1]) >= wanted:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"prometheus did not scrape its {wanted} target(s) for {history:g}s "
                           f"within {timeout:g}s")

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result; raises ``requests.HTTPError`` on a rejected query."""
        params = {"query": promql, **({"time": f"{at:.3f}"} if at is not None else {})}
        answer = requests.get(f"{self.url}/api/v1/query?{urlencode(params)}", timeout=5)
        answer.raise_for_status()
        result: list[dict[str, Any]] = answer.json()["data"]["result"]
        return result

    def stop(self) -> None:
        self.process.stop()
