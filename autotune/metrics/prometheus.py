"""Read a trial's metrics from Prometheus (an existing server, or our private one in local mode).

Every query is evaluated at the window's end, after a scrape newer than that end has landed for
every target of the live candidate, so the window's last seconds are in the data (a target's
scrapes are committed in order, and ``up`` in the same commit as the samples it reports on).
With our private Prometheus, the window must also start after a successful scrape of every
target. A result that is empty, NaN, infinite or has several series is a failed read with the
reason, never a value.

Waiting polls on the injected clock (``wait_until``), a fraction of a scrape interval apart, so
no wait overshoots the event it waits for by more than that.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException

from autotune.clock import Clock, wait_until
from autotune.errors import MetricsError
from autotune.experiment.models import Prometheus
from autotune.live import Live, Window
from autotune.metrics import promql
from autotune.metrics.base import Reading, ScrapeManager, Unavailable

log = logging.getLogger(__name__)

RETRY_PAUSE = 0.1
"""Before the one retry of a failed read, with our private Prometheus (whose ingestion the
``up`` timestamps prove); an external one gets a full scrape interval (it may sit behind a
remote-write or federation path that lags)."""


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
    """Metrics from Prometheus.

    ``warmup``: the seconds the caller waits between ``observe()`` and the window (the trial's
    warm-up). When it spans at least two scrape intervals, ``observe()`` returns as soon as our
    private Prometheus scrapes every target of the candidate (an announced target already is),
    instead of waiting for the first *successful* scrape; ``read()`` then checks that every
    target was up before the window started, and fails the read with the reason if not.
    """

    def __init__(self, config: Prometheus, clock: Clock, *,
                 embedded: ScrapeManager | None = None, warmup: float = 0.0) -> None:
        if config.url is None and embedded is None:
            raise MetricsError("prometheus.url: required (no private Prometheus for this target)")
        self.config, self.clock, self.embedded = config, clock, embedded
        self.warmup = warmup
        self._client: PrometheusConnect | None = None

    @property
    def scrape_interval(self) -> float:
        return self.config.scrape_interval

    @property
    def _poll(self) -> float:
        """Our own Prometheus on loopback is polled often; an external one more gently."""
        if self.embedded is not None:
            return max(0.005, min(0.05, self.scrape_interval / 50))
        return max(0.01, min(0.2, self.scrape_interval / 2))

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
        wanted = len(live.endpoints)
        # up == 0 still means "scraped": enough when the warm-up leaves time for a success.
        condition = "" if self.warmup >= 2 * self.scrape_interval else " == 1"
        query = f"count(up{{{selector}}}{condition})"
        timeout = max(15.0, 10 * self.scrape_interval)
        reading: Reading = Unavailable("not queried")

        def scraped() -> bool:
            nonlocal reading
            reading = self._query(query, self.clock.now())
            return reading == wanted

        if wait_until(self.clock, scraped, timeout, self._poll):
            return
        down = self._query(f"up{{{selector}}} == 0", self.clock.now())
        seen = down if isinstance(down, Unavailable) else reading
        raise MetricsError(f"Prometheus is not scraping every endpoint of the service "
                           f"({dict(live.endpoints)}) after {timeout:g}s: {seen}")

    def _await_scrape_after(self, live: Live, at: float) -> None:
        selector = promql.render_selector(live.scope)
        timeout = max(10.0, 5 * self.scrape_interval)

        def fresh() -> bool:
            last = self._query(f"min(timestamp(up{{{selector}}}))", self.clock.now())
            return isinstance(last, float) and last >= at

        wait_until(self.clock, fresh, timeout, self._poll, error=lambda _: MetricsError(
            f"no scrape of the service after the window ended (waited {timeout:g}s)"))

    def _check_up_before(self, live: Live, at: float) -> None:
        """Every target's latest scrape at ``at`` succeeded (so the window starts covered)."""
        selector = promql.render_selector(live.scope)
        up = self._query(f"count(up{{{selector}}} == 1)", at)
        if up != len(live.endpoints):
            raise MetricsError(
                f"not every endpoint of the service was scraped successfully before the window "
                f"started ({up if isinstance(up, float) else up.reason}; "
                f"{len(live.endpoints)} wanted): was the warm-up shorter than two scrape "
                "intervals?")

    def read(self, queries: Mapping[str, str], window: Window, live: Live) -> dict[str, Reading]:
        try:
            self._await_scrape_after(live, window.end)
            if self.embedded is not None:
                self._check_up_before(live, window.start)
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
            # One more try, same window: a transient error, or a lagging external Prometheus.
            self.clock.sleep(RETRY_PAUSE if self.embedded is not None else self.scrape_interval)
            for name in retry:
                out[name] = self._query(queries[name], window.end)
        return out

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()
        self._client = None
