"""The local stack's announced scrape targets against the real Prometheus: a trial's targets are
scraped without a break from their announcement to the end of its window.

The failure this reproduces came from CI (``test_three_trial_study_records_every_metric``, a
fresh clone): the first trial's read found "not every endpoint of the service was scraped
successfully in the 2s before the window started (no series for
count(max_over_time(up{autotune_generation="1"}[2s]) == 1); 2 wanted)". ``observe`` had found
both targets scraped, so they were dropped afterwards. The cause: ``LocalService.apply``
announces the *next* generation's targets when a trial starts, before ``observe`` makes the
trial's own current, and that announcement replaced the trial's: for a moment the targets file
lacked them. When Prometheus's discovery update tick (every 5 s) fell in that moment, its scrape
manager dropped them at its next reload (within 5 s: in the warm-up, or in the window) and added
them back 5 s later, as new targets.

The test makes the tick certain: between the announcement and ``observe`` it waits until
Prometheus's discovery manager has received the file as ``apply`` left it and then sent an
update (Prometheus's own counters). Then it follows Prometheus through the two scrape-manager
reloads that apply that update and the next one, and reads the window in between. Without the
fix, each target of the trial has a 5 s gap there; with it, a sample every scrape interval.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from autotune.clock import SystemClock
from autotune.experiment.models import Prometheus
from autotune.live import Live, Matcher, Window
from autotune.metrics.prometheus import PrometheusSource
from autotune.platforms.local.prometheus import EmbeddedPrometheus
from tests.support.waiting import targets_scraped

pytestmark = pytest.mark.integration

WARMUP = 2.0  # the CI test's warm-up
TIMEOUT = 30.0  # any wait on Prometheus: two 5 s ticks, a scrape, and a busy machine


class _Exporter(BaseHTTPRequestHandler):
    """``/g<generation>/<job>/metrics``; a generation's endpoints answer 503 until it is
    started, as nothing listens on an announced port before its processes do."""

    started: set[str] = set()

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        if self.path.split("/")[1] not in self.started:
            self.send_error(503)
            return
        body = f"# TYPE work_total counter\nwork_total {time.time():.3f}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def exporter() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        _Exporter.started.clear()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _endpoints(exporter: str, generation: int) -> dict[str, str]:
    return {job: f"{exporter}/g{generation}/{job}/metrics"
            for job in ("autotune-service", "autotune-loadgen")}


def _labels(generation: int) -> dict[str, str]:
    return {"autotune_generation": str(generation)}


def _own(prometheus: EmbeddedPrometheus, name: str) -> float:
    """A counter of Prometheus itself (its /metrics), summed over its series."""
    text = requests.get(f"{prometheus.url}/metrics", timeout=5).text
    return sum(float(m.group(1)) for m in
               re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})?\s+(\S+)$", text, re.MULTILINE))


def _until(what: str, condition: Any) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {TIMEOUT:g}s"
        time.sleep(0.02)


def test_a_trials_targets_are_scraped_without_a_break(
        exporter: str, tmp_path: Any) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    prometheus = EmbeddedPrometheus(1.0, None, logs)
    source = PrometheusSource(Prometheus(), SystemClock(), embedded=prometheus, warmup=WARMUP)
    started = time.monotonic()
    try:
        # LocalService: generation 1 is announced when the service is created, and Prometheus
        # scrapes it (nothing answers yet) while the load is calibrated.
        prometheus.announce(_endpoints(exporter, 1), _labels(1))
        source.client()  # starts Prometheus
        targets_scraped(source, 1, timeout=TIMEOUT)

        # apply(): the processes of generation 1 start; generation 2 is announced.
        _Exporter.started.add("g1")
        received = _own(prometheus, "prometheus_sd_received_updates_total")
        prometheus.announce(_endpoints(exporter, 2), _labels(2))
        # The discovery delay: an update tick between apply() and observe().
        _until("the discovery manager received the file apply() left",
               lambda: _own(prometheus, "prometheus_sd_received_updates_total") > received)
        sent = _own(prometheus, "prometheus_sd_updates_total")
        syncs = _own(prometheus, "prometheus_target_scrape_pool_sync_total")
        _until("the discovery manager sent it",
               lambda: _own(prometheus, "prometheus_sd_updates_total") > sent)

        live = Live(env={}, since=time.time(), scope=(Matcher("autotune_generation", "1"),),
                    endpoints=_endpoints(exporter, 1))
        source.observe(live)
        observed = time.time()
        # The scrape manager's reload that applies the update sent above, then the next one
        # (which has what observe() wrote): without the fix, the first drops generation 1,
        # the second adds it back.
        _until("two scrape-manager reloads",
               lambda: _own(prometheus, "prometheus_target_scrape_pool_sync_total") >= syncs + 2)
        window = Window(observed + WARMUP, time.time())
        assert window.seconds >= 2.5, window  # two 5 s ticks apart, less the warm-up

        span = f"{round((window.end - observed) * 1000)}ms"
        coverage = source._query(
            f'min(count_over_time(up{{autotune_generation="1"}}[{span}]))', window.end)
        rate = source.read({"v": f'sum(rate(work_total{{autotune_generation="1"}}'
                                 f'[{round(window.seconds * 1000)}ms]))'}, window, live)["v"]
    finally:
        prometheus.stop()
    # And a scrape every second from observe() to the window's end, for each target of the
    # trial (one may fall just outside the range). Without the fix: none for 5 s.
    # Two endpoints, each counter advancing one per second. Without the fix: "not every
    # endpoint of the service was scraped successfully in the 2s before the window started".
    assert isinstance(rate, float) and 1.5 < rate < 2.5, rate
    seconds = window.end - observed
    assert isinstance(coverage, float) and coverage >= seconds - 1.5, (coverage, seconds)
    print(f"test {time.monotonic() - started:.1f}s, observe() to the window's end {seconds:.1f}s")
