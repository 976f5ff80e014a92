"""Read a trial's metrics from Prometheus (an existing server, or our private one in local mode).

Every query is evaluated at the window's end, after a scrape newer than that end has landed, so
the window's last seconds are in the data. A result that is empty, NaN, infinite or has several
series is a failed read with the reason, never a value.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException

from autotune.clock import Clock
from autotune.errors import MetricsError
from autotune.experiment.models import Prometheus
from autotune.live import Live, Window
from autotune.metrics import promql
from autotune.metrics.base import Reading, ScrapeManager, Unavailable

log = logging.getLogger(__name__)


def _auth_headers(config: Prometheus) -> dict[str, str]:
    headers = dict(config.headers)
    token = None
    if config.token_env:
        token = os.environ.get(config.token_env)
        if token is None:
            raise MetricsError(f"prometheus.token_env: the variable {config.token_env} is not set")
    elif config.token_file:
        try:
            token = Path(config.token_file).read_text().strip()
        except OSError as e:
            raise MetricsError(f"prometheus.token_file: cannot read it: {e.strerror}") from None
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def interpret(result: Any, query: str) -> Reading:
    """One query's ``data.result`` as a number, or the reason it is not one."""
    if isinstance(result, list) and len(result) == 2 and not isinstance(result[0], dict):
        value = float(result[1])  # a scalar: [time, "value"]
    elif isinstance(result, list):
        if not result:
            return Unavailable(f"no series for {query}")
        if len(result) > 1:
            labels = [r.get("metric", {}) for r in result[:3]]
            return Unavailable(f"{len(result)} series where one was expected (e.g. {labels}); "
                               "aggregate with sum()/max() or narrow the selector")
        value = float(result[0]["value"][1])
    else:
        return Unavailable(f"unexpected result {result!r}")
    if math.isnan(value) or math.isinf(value):
        return Unavailable(f"{value} (e.g. no requests or no GC cycle in the window)")
    return value


class PrometheusSource:
    def __init__(self, config: Prometheus, clock: Clock, *,
                 embedded: ScrapeManager | None = None) -> None:
        if config.url is None and embedded is None:
            raise MetricsError("prometheus.url: required (no private Prometheus for this target)")
        self.config, self.clock, self.embedded = config, clock, embedded
        self._client: PrometheusConnect | None = None

    @property
    def scrape_interval(self) -> float:
        return self.config.scrape_interval

    def client(self) -> PrometheusConnect:
        if self._client is None:
            url = self.config.url or (self.embedded.start() if self.embedded else "")
            session = requests.Session()
            session.verify = self.config.ca_file or self.config.verify_tls
            self._client = PrometheusConnect(url=url, headers=_auth_headers(self.config),
                                             session=session, timeout=self.config.timeout)
        return self._client

    def _query(self, query: str, at: float) -> Reading:
        try:
            result = self.client().custom_query(query, params={"time": f"{at:.3f}"})
        except PrometheusApiClientException as e:
            return Unavailable(f"query rejected: {str(e)[:300]}")
        except requests.RequestException as e:
            return Unavailable(f"Prometheus unreachable: {type(e).__name__}: {e}")
        return interpret(result, query)

    def observe(self, live: Live) -> None:
        if self.embedded is None:
            return
        self.client()
        labels = {m.label: m.value for m in live.scope if not m.regex}
        self.embedded.set_targets(live.endpoints, labels)
        selector = promql.render_selector(live.scope)
        deadline = time.monotonic() + max(15.0, 10 * self.scrape_interval)
        reading: Reading = Unavailable("not queried")
        while time.monotonic() < deadline:
            reading = self._query(f"count(up{{{selector}}} == 1)", self.clock.now())
            if reading == len(live.endpoints):
                return
            time.sleep(min(0.2, self.scrape_interval / 2))
        down = self._query(f"up{{{selector}}} == 0", self.clock.now())
        seen = down if isinstance(down, Unavailable) else reading
        raise MetricsError(f"Prometheus is not scraping every endpoint of the service "
                           f"({dict(live.endpoints)}): {seen}")

    def _await_scrape_after(self, live: Live, at: float) -> None:
        selector = promql.render_selector(live.scope)
        deadline = time.monotonic() + max(10.0, 5 * self.scrape_interval)
        while time.monotonic() < deadline:
            last = self._query(f"min(timestamp(up{{{selector}}}))", self.clock.now())
            if isinstance(last, float) and last >= at:
                return
            time.sleep(min(0.2, self.scrape_interval / 2))
        raise MetricsError(f"no scrape of the service after the window ended "
                           f"(waited {max(10.0, 5 * self.scrape_interval):g}s)")

    def read(self, queries: Mapping[str, str], window: Window, live: Live) -> dict[str, Reading]:
        try:
            self._await_scrape_after(live, window.end)
        except MetricsError as e:
            return {name: Unavailable(str(e)) for name in queries}
        out: dict[str, Reading] = {}
        retry = []
        for name, query in queries.items():
            reading = self._query(query, window.end)
            out[name] = reading
            if isinstance(reading, Unavailable) and "rejected" not in reading.reason:
                retry.append(name)
        if retry:
            # Ingestion can trail the scrape timestamp briefly: one more try, same window.
            time.sleep(self.scrape_interval)
            for name in retry:
                out[name] = self._query(queries[name], window.end)
        return out

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()
        self._client = None
