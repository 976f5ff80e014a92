"""An external Prometheus whose clock is off this host's: every window would be read at the
wrong time, silently. Checked once per run, at the first trial (``PrometheusSource.observe``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from autotune.clock import SystemClock
from autotune.errors import MetricsError
from autotune.experiment.models import Prometheus
from autotune.live import Live
from autotune.metrics.prometheus import PrometheusSource
from tests.support.http import answer


class _Skewed(BaseHTTPRequestHandler):
    """Prometheus's query API, evaluating `time()` at its own now: this host's plus a skew."""

    skew = 0.0
    asked: list[str] = []

    def do_GET(self) -> None:
        params = {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}
        self.asked.append(params.get("query", ""))
        now = float(params.get("time", time.time() + self.skew))
        answer(self, json.dumps({"status": "success", "data": {
            "resultType": "scalar", "result": [now, repr(now)]}}).encode(), "application/json")

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[type[_Skewed]]:
    handler = type("Handler", (_Skewed,), {"asked": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield handler
    server.shutdown()
    server.server_close()


def _source(prometheus: type[_Skewed]) -> PrometheusSource:
    config = Prometheus(url=prometheus.url, scrape_interval=30)  # type: ignore[attr-defined]
    return PrometheusSource(config, SystemClock())


LIVE = Live(env={}, since=0.0, scope=())


def test_a_prometheus_ahead_by_more_than_half_its_interval_is_refused(
        prometheus: type[_Skewed]) -> None:
    prometheus.skew = 20.0
    with pytest.raises(MetricsError, match=r"clock is 2\d\.\d s ahead of this host's \(more "
                                           r"than half its 30 s scrape interval\)"):
        _source(prometheus).observe(LIVE)


def test_a_prometheus_behind_is_refused_too(prometheus: type[_Skewed]) -> None:
    prometheus.skew = -40.0
    with pytest.raises(MetricsError, match=r"clock is \d+\.\d s behind this host's"):
        _source(prometheus).observe(LIVE)


def test_a_few_seconds_off_is_within_a_30_s_scrape_and_checked_once(
        prometheus: type[_Skewed]) -> None:
    prometheus.skew = 3.0
    source = _source(prometheus)
    source.observe(LIVE)
    source.observe(LIVE)
    assert prometheus.asked.count("time()") == 1
