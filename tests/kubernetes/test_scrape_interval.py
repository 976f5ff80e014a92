"""Issue 9.1 against a real Prometheus that scrapes every 30 s, like kube-prometheus-stack.

A fake exporter stands in for two pods (labels ``namespace``/``pod`` as the usual
``kubernetes-pods`` relabelling produces them). The failure first: a source that assumes the
configured 1 s gives up waiting for the scrape after the window. Then the learned interval makes
the same read succeed, and a new pod is waited for until Prometheus scrapes it.
"""

from __future__ import annotations

import json
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
from autotune.local.prometheus import EmbeddedPrometheus
from autotune.metrics.base import Unavailable
from autotune.metrics.prometheus import PrometheusSource

pytestmark = pytest.mark.integration

INTERVAL = 30.0
QUERY = "max(last_over_time(http_requests_total{ %s }[2m]))"


class _Exporter(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        body = (b"# TYPE http_requests_total counter\n"
                + f"http_requests_total {int(time.time())}\n".encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Cluster:
    """The exporter's pods as Prometheus discovers them (file_sd with pod labels)."""

    def __init__(self, prometheus: EmbeddedPrometheus, exporter: str) -> None:
        self.prometheus, self.exporter = prometheus, exporter
        self.pods: list[str] = []

    def add_pod(self, pod: str) -> None:
        self.pods.append(pod)
        groups: list[dict[str, Any]] = []
        for name in self.pods:
            groups += EmbeddedPrometheus._groups(
                {"kubernetes-pods": f"{self.exporter}/{name}/metrics"},
                {"namespace": "shop", "pod": name})
        self.prometheus.targets_file.write_text(json.dumps(groups))

    def live(self, *pods: str) -> Live:
        return Live(env={}, since=time.time(), pods=pods,
                    scope=(Matcher("namespace", "shop"), Matcher("pod", "|".join(pods), True)))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Cluster]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    logs = tmp_path_factory.mktemp("prom") / "logs"
    logs.mkdir()
    prometheus = EmbeddedPrometheus(INTERVAL, None, logs)
    try:
        prometheus.start()
        world = _Cluster(prometheus, f"http://127.0.0.1:{server.server_address[1]}")
        world.add_pod("api-a")
        yield world
    finally:
        prometheus.stop()
        server.shutdown()
        server.server_close()


def _source(cluster: _Cluster, learn: bool, live: Live) -> PrometheusSource:
    source = PrometheusSource(Prometheus(url=cluster.prometheus.url), SystemClock())
    if learn:
        source.learn_interval(live.scope)
    return source


def _targets(url: str) -> list[dict[str, Any]]:
    data = requests.get(f"{url}/api/v1/targets", timeout=5).json()["data"]
    return list(data["activeTargets"])


def test_the_interval_is_read_from_the_targets_then_from_the_config(cluster: _Cluster) -> None:
    deadline = time.monotonic() + 20
    while not _targets(cluster.prometheus.url) and time.monotonic() < deadline:
        time.sleep(0.2)  # file_sd changes reach the scrape manager on a 5 s tick
    live = cluster.live("api-a")
    source = _source(cluster, True, live)
    assert source.scrape_interval == INTERVAL
    assert source.interval_source == "scrape pool 'autotune' (1 target(s) of the service)"
    assert source.check_window(60.0) is not None
    assert "shorter than 4 scrape intervals (2m00s)" in str(source.check_window(60.0))
    assert source.check_window(120.0) is None

    elsewhere = _source(cluster, True, cluster.live("api-zzz"))
    assert elsewhere.scrape_interval == INTERVAL
    assert elsewhere.interval_source.startswith("the global scrape_interval")


def test_reading_waits_for_the_scrape_after_the_window(cluster: _Cluster) -> None:
    live = cluster.live("api-a")
    query = QUERY % 'namespace="shop", pod=~"api-a"'
    deadline = time.monotonic() + INTERVAL + 10
    while [t["health"] for t in _targets(cluster.prometheus.url)] != ["up"]:
        assert time.monotonic() < deadline, "the exporter was never scraped"
        time.sleep(0.2)  # the first scrape comes at a random offset within the interval
    end = time.time()
    window = Window(end - 120.0, end)
    # The defect: assuming the configured 1 s, the wait for a newer scrape gives up (12 s).
    assumed = _source(cluster, False, live).read({"v": query}, window, live)["v"]
    assert isinstance(assumed, Unavailable)
    assert "no scrape of the service after the window ended" in assumed.reason
    # With the real interval, the wait is long enough for Prometheus' next scrape.
    end = time.time()
    started = time.monotonic()
    value = _source(cluster, True, live).read({"v": query}, Window(end - 120.0, end), live)["v"]
    # Evaluated at the window's end: the scrape of its last interval, not a later one.
    assert isinstance(value, float) and end - INTERVAL - 1 <= value <= end, (value, end)
    assert time.monotonic() - started <= INTERVAL + 12


def test_a_new_pod_is_waited_for_until_it_is_scraped(cluster: _Cluster) -> None:
    cluster.add_pod("api-b")
    live = cluster.live("api-a", "api-b")
    source = _source(cluster, True, live)
    started = time.monotonic()
    source.observe(live)
    waited = time.monotonic() - started
    up = source._query('count(up{namespace="shop", pod=~"api-a|api-b"} == 1)', time.time())
    assert up == 2.0
    assert waited <= INTERVAL + 10, waited

