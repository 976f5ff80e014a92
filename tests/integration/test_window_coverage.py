"""The local window check against the real Prometheus: one failed scrape just before the window
does not discard a trial whose warm-up was scraped; a service never scraped does.

The failure this reproduces came from CI on a busy 2-core machine: the demo with GOMAXPROCS=1
under stress missed the scrape right before the window (scrape_timeout is the 1 s interval),
and the trial failed although every sample its queries use was there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from autotune.clock import SystemClock
from autotune.experiment.models import Prometheus
from autotune.live import Live, Matcher, Window
from autotune.metrics.base import Unavailable
from autotune.metrics.prometheus import PrometheusSource
from autotune.platforms.local.prometheus import EmbeddedPrometheus
from tests.support.waiting import until

pytestmark = pytest.mark.integration

WARMUP = 3.0
TIMEOUT = 15.0  # any wait on Prometheus's 1 s scrapes, on a busy machine


class _Exporter(BaseHTTPRequestHandler):
    failing = threading.Event()  # while set, every scrape gets a 500 (up == 0)

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        if self.failing.is_set():
            self.send_error(500)
            return
        body = f"# TYPE work_total counter\nwork_total {time.time():.3f}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedPrometheus, str]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    logs = tmp_path_factory.mktemp("prom") / "logs"
    logs.mkdir()
    prometheus = EmbeddedPrometheus(1.0, None, logs)
    try:
        prometheus.start()
        yield prometheus, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        _Exporter.failing.clear()
        prometheus.stop()
        server.shutdown()
        server.server_close()


def _live(exporter: str, generation: str) -> Live:
    return Live(env={}, since=time.time(), scope=(Matcher("autotune_generation", generation),),
                endpoints={"svc": f"{exporter}/svc/metrics", "lg": f"{exporter}/lg/metrics"})


def _trial(stack: tuple[EmbeddedPrometheus, str], generation: str,
           fail_at_start: bool, fail_warmup: bool) -> float | Unavailable:
    prometheus, exporter = stack
    source = PrometheusSource(Prometheus(), SystemClock(), embedded=prometheus, warmup=WARMUP)
    live = _live(exporter, generation)
    source.observe(live)  # returns once both endpoints of this generation were scraped
    up = f'up{{autotune_generation="{generation}"}}'

    def both(query: str) -> bool:
        return source._query(query, time.time()) == 2.0

    if fail_warmup:
        _Exporter.failing.set()
        # No successful scrape in the warm-up before the window starts.
        until("a warm-up without a successful scrape",
              lambda: both(f"count(max_over_time({up}[{WARMUP:g}s]) == 0)"), TIMEOUT)
    else:
        # A successful scrape in the warm-up, after observe().
        since = time.time()
        until("a successful scrape in the warm-up",
              lambda: both(f"count(timestamp({up} == 1) > {since:.3f})"), TIMEOUT)
    if fail_at_start:  # the last scrape before the window fails
        since = time.time()
        _Exporter.failing.set()
        until("a failed scrape of both endpoints",
              lambda: both(f"count(timestamp({up} == 0) > {since:.3f})"), TIMEOUT)
    start = time.time()
    # The failure goes on into the window: its length is the scenario, not a wait for anything.
    time.sleep(0.3)
    _Exporter.failing.clear()
    cleared = time.time()
    # Four successful scrapes of each endpoint in the window (what 4 s of 1 s scrapes gave).
    def four_scrapes() -> bool:
        span = f"{round((time.time() - cleared) * 1000)}ms"
        fewest = source._query(f'min(count_over_time(work_total{{autotune_generation='
                               f'"{generation}"}}[{span}]))', time.time())
        return isinstance(fewest, float) and fewest >= 4

    until("four successful scrapes of each endpoint in the window", four_scrapes, TIMEOUT)
    window = Window(start, time.time())
    query = (f'sum(rate(work_total{{autotune_generation="{generation}"}}'
             f'[{round(window.end - window.start)}s]))')
    return source.read({"v": query}, window, live)["v"]


def test_one_failed_scrape_before_the_window_keeps_the_trial(
        stack: tuple[EmbeddedPrometheus, str]) -> None:
    value = _trial(stack, "1", fail_at_start=True, fail_warmup=False)
    # two endpoints, each counter advancing one per second
    assert isinstance(value, float) and 1.5 < value < 2.5, value


def test_a_warmup_without_a_successful_scrape_fails_the_trial(
        stack: tuple[EmbeddedPrometheus, str]) -> None:
    value = _trial(stack, "2", fail_at_start=True, fail_warmup=True)
    assert isinstance(value, Unavailable)
    assert "scraped successfully in the 3s before the window started" in value.reason
