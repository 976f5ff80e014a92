"""Read a trial's metrics from Prometheus (an existing server, or our private one in local mode).

Every query is evaluated at the window's end, after a scrape newer than that end has landed for
every target of the live candidate, so the window's last seconds are in the data (a target's
scrapes are committed in order, and ``up`` in the same commit as the samples it reports on).
With our private Prometheus, the window must also start after a successful scrape of every
target. A result that is empty, NaN, infinite or has several series is a failed read with the
reason, never a value.

Waiting polls on the injected clock (``wait_until``), a fraction of a scrape interval apart, so
no wait overshoots the event it waits for by more than that.

An external Prometheus scrapes at its own pace (30 s in kube-prometheus-stack, 1 m in the
prometheus-community chart), not at the 1 s we would like: ``learn_interval`` reads the real
interval of the targets that scrape the service (``/api/v1/targets``), or the global one
(``/api/v1/status/config``), and every wait and the "window >= 4 intervals" rule use it. Query
front ends (Thanos Query, Mimir, managed Prometheus services) serve neither endpoint: then a
``prometheus.scrape_interval`` the user set is used as given, else the interval is inferred from
the spacing of the service's ``up`` samples, else autotune refuses to start and names the field
to set. The private Prometheus's 1 s is never assumed for a server we did not configure. Before
a window starts, every pod of the candidate must have been scraped successfully
(``up{pod=...} == 1``), or the window's first intervals would be missing.

Credentials are used and never written. A user and password in ``prometheus.url``
(``https://user:password@host``) are taken out of the URL when the client is made and sent as
HTTP basic auth, so no request, and no error message of requests or urllib3, has a URL with a
password; the bearer token and header values go in headers, which no message quotes. Every
message made of a library's exception is scrubbed of them all the same (``redaction.scrub``),
before it is cut short.

Its size (~575 lines) is one MetricSource with three jobs it cannot do without each other:
learning the scrape interval, waiting until the window's targets are scraped, and the queries.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import math
import os
import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import requests
import yaml
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from autotune import redaction
from autotune.clock import Clock, wait_until
from autotune.deadline import TotalDeadline
from autotune.errors import MetricsError
from autotune.experiment.durations import format_duration, parse_duration
from autotune.experiment.models import Prometheus
from autotune.live import Live, Matcher, Window
from autotune.metrics import promql
from autotune.metrics.base import Reading, ScrapeManager, Unavailable

log = logging.getLogger(__name__)

SAMPLES_SPAN = 300.0
"""Seconds of ``up`` samples the interval is inferred from: five scrapes at 1 m, the longest
interval of the common charts."""
SAMPLES_STEP = 1.0
"""The range query's step: a sample is seen as long as scrapes are at least this far apart
(every step returns the newest sample's timestamp); a shorter interval is measured again with
``FINE_STEP`` over ``FINE_SPAN``."""
FINE_SPAN, FINE_STEP = 20.0, 0.05

RETRY_PAUSE = 0.1
"""Before the one retry of a failed read, with our private Prometheus (whose ingestion the
``up`` timestamps prove); an external one gets a full scrape interval (it may sit behind a
remote-write or federation path that lags)."""


class PrometheusUnreachable(MetricsError):
    """Prometheus did not answer at all (connection refused, no such host, a timeout, a gateway
    that has no backend): nothing about it, its scrape interval included, can be known now."""


def _auth_headers(config: Prometheus) -> tuple[dict[str, str], str | None]:
    """The headers of every request, and the bearer token among them (None without one)."""
    headers = dict(config.headers)
    token = None
    if config.token_env:
        token = os.environ.get(config.token_env)
        if token is None:
            raise MetricsError(f"prometheus.token_env: the variable {config.token_env} is not set")
        token = token.strip()  # a secret mounted from a file often ends with a newline
    elif config.token_file:
        try:
            token = Path(config.token_file).read_text().strip()
        except OSError as e:
            raise MetricsError(f"prometheus.token_file: cannot read it: {e.strerror}") from None
    if token and not token.isprintable():
        # Never in the message: requests' own error would quote the whole header.
        raise MetricsError("prometheus.token_env/token_file: the token contains a control "
                           "character (a line break inside it?)")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers, token or None


def interpret(result: Any, query: str, at: float | None = None) -> Reading:
    """One query's ``data.result`` as a number, or the reason it is not one. An answer
    evaluated at another time than ``at`` (a lagging replica, a result cache) is not one."""
    if isinstance(result, list) and len(result) == 2 and not isinstance(result[0], dict):
        stamp, value = float(result[0]), float(result[1])  # a scalar: [time, "value"]
    elif isinstance(result, list):
        if not result:
            return Unavailable(f"no series for {query}")
        if len(result) > 1:
            labels = [r.get("metric", {}) for r in result[:3]]
            return Unavailable(f"{len(result)} series where one was expected (e.g. {labels}); "
                               "aggregate with sum()/max() or narrow the selector")
        stamp, value = float(result[0]["value"][0]), float(result[0]["value"][1])
    else:
        return Unavailable(f"unexpected result {result!r}")
    if at is not None and abs(stamp - at) > 0.002:
        return Unavailable(f"stale answer: evaluated at {stamp:.3f}, not at {at:.3f} as asked "
                           "(a lagging replica or a result cache in front of Prometheus?)")
    if math.isnan(value) or math.isinf(value):
        return Unavailable(f"{value} (e.g. no requests or no GC cycle in the window)")
    return value


def matches(scope: Sequence[Matcher], labels: Mapping[str, str]) -> bool:
    """Whether a target with these (relabelled) labels exposes the series ``scope`` selects."""
    for m in scope:
        value = labels.get(m.label, "")
        if m.regex:
            if re.fullmatch(m.value, value) is None:
                return False
        elif value != m.value:
            return False
    return True


def interval_of_targets(targets: Sequence[Mapping[str, Any]],
                        scope: Sequence[Matcher]) -> tuple[float, str] | None:
    """The longest scrape interval among the active targets that scrape ``scope``, and which."""
    found: list[tuple[float, str]] = []
    for t in targets:
        raw = t.get("scrapeInterval")
        if not raw or not matches(scope, t.get("labels") or {}):
            continue
        try:
            found.append((parse_duration(raw), str(t.get("scrapePool") or t.get("labels", {})
                                                      .get("job", "?"))))
        except ValueError:
            continue
    if not found:
        return None
    seconds, pool = max(found)
    return seconds, f"scrape pool {pool!r} ({len(found)} target(s) of the service)"


def configured_interval(config: Prometheus) -> float | None:
    """``prometheus.scrape_interval`` when the experiment sets it, else None: the field's default
    is our private Prometheus's interval and says nothing about a server we did not configure."""
    if "scrape_interval" not in config.model_fields_set:
        return None
    return config.scrape_interval


def spacing(result: Any) -> tuple[float, int] | None:
    """From a range query of ``timestamp(up{...})``: the longest, over the series, of the median
    gap between successive distinct sample timestamps, and how many series had a gap; None when
    no series has two samples. The median, so that one missed scrape does not double it; the
    longest series, like ``interval_of_targets``, because every wait must cover the slowest."""
    medians: list[float] = []
    for series in result if isinstance(result, list) else ():
        try:
            stamps = sorted({float(v) for _, v in series.get("values", [])})
        except (TypeError, ValueError):
            continue
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        if gaps:
            medians.append(statistics.median(gaps))
    if not medians:
        return None
    seconds = max(medians)
    # A scrape's timestamp is when its tick fired, late by milliseconds on a busy server: an
    # interval within 50 ms of whole seconds is that many (4 x 15.001 s is not a 60 s window).
    whole = round(seconds)
    if whole >= 1 and abs(seconds - whole) <= 0.05:
        seconds = float(whole)
    return round(seconds, 3), len(medians)


def global_interval(config_yaml: str) -> float:
    """``global.scrape_interval`` of a Prometheus configuration (Prometheus' default: 1m)."""
    config = yaml.safe_load(config_yaml) or {}
    raw = (config.get("global") or {}).get("scrape_interval", "1m")
    return parse_duration(raw)


class PrometheusSource:
    """Metrics from Prometheus.

    ``warmup``: the seconds the caller waits between ``observe()`` and the window (the trial's
    warm-up). When it spans at least two scrape intervals, ``observe()`` returns as soon as our
    private Prometheus scrapes every target of the candidate (an announced target already is),
    instead of waiting for the first *successful* scrape; ``read()`` then checks that every
    target was up before the window started, and fails the read with the reason if not.

    ``window``: the trial's window. An external Prometheus whose interval is still unknown at
    ``observe()`` (it did not answer when the run started) is asked then, and a window shorter
    than four of its intervals fails the trial with the reason.
    """

    def __init__(self, config: Prometheus, clock: Clock, *,
                 embedded: ScrapeManager | None = None, warmup: float = 0.0,
                 window: float | None = None) -> None:
        if config.url is None and embedded is None:
            raise MetricsError("prometheus.url: required (no private Prometheus for this target)")
        self.config, self.clock, self.embedded = config, clock, embedded
        self.warmup, self.window = warmup, window
        self._client: PrometheusConnect | None = None
        self._session: requests.Session | None = None
        self._secrets: tuple[str, ...] = ()
        """What ``client()`` sends to authenticate, scrubbed from every message."""
        self._learned: float | None = None
        self._clock_checked = False
        # What this experiment says (our private Prometheus: what we configured it with), never
        # the field's default for a server we did not configure.
        self._configured = (embedded.scrape_interval if embedded is not None
                            else configured_interval(config))
        self.interval_source = ("prometheus.scrape_interval (configured)"
                                if self._configured is not None else "unknown")

    @property
    def scrape_interval(self) -> float:
        if self._learned is not None:
            return self._learned
        if self._configured is None:
            raise MetricsError("the scrape interval of Prometheus is not known: it was not "
                               "learned from the server, and prometheus.scrape_interval is "
                               "not set")
        return self._configured

    def learn_interval(self, scope: Sequence[Matcher] = (),
                       wider: Sequence[Matcher] | None = None) -> float:
        """Find the scrape interval an external Prometheus really uses for ``scope`` and use it
        from now on: the targets' ``scrapeInterval``, else the global one. Where the server
        serves neither endpoint (a query front end), the ``prometheus.scrape_interval`` the
        experiment sets, else the spacing of the ``up`` samples of ``scope``, or of ``wider``
        when ``scope`` has none yet (new pods; by default the scope's exact matchers, e.g. the
        namespace, whose pods the same discovery scrapes).

        Raises ``MetricsError`` naming prometheus.scrape_interval when none of these says:
        guessing would make every wait and every ``rate()`` wrong on a server that scrapes
        every 30 s or 1 m; ``PrometheusUnreachable`` when the server did not answer at all.
        """
        if self.embedded is not None:
            return self.scrape_interval
        found, unserved, reached = self._server_interval(scope)
        if found is None and self._configured is not None:
            # Set by the user for a server that cannot tell: a fact, not a guess to check. An
            # unreachable server is worth a warning: every trial will fail until it answers.
            log.log(logging.INFO if reached else logging.WARNING,
                    "Prometheus does not say how often it scrapes (%s); using "
                    "prometheus.scrape_interval = %s", unserved,
                    format_duration(self._configured))
            return self._configured
        if found is None and not reached:
            raise PrometheusUnreachable(f"cannot ask Prometheus how often it scrapes ({unserved})")
        if found is None:
            found, uninferred = self._inferred_interval(scope, wider)
            if found is None:
                raise MetricsError(
                    f"prometheus.scrape_interval: not set, and Prometheus does not say how "
                    f"often it scrapes the service ({unserved}) nor can it be inferred "
                    f"({uninferred}); set it to the interval at which the service is scraped")
        self._learned, self.interval_source = found
        log.info("Prometheus scrapes every %s: %s", format_duration(found[0]), found[1])
        return found[0]

    def _server_interval(self, scope: Sequence[Matcher]
                         ) -> tuple[tuple[float, str] | None, str, bool]:
        """The interval the server itself reports for ``scope`` (its targets, else its global
        configuration), or None and why not; and whether the server answered at all."""
        client = self.client()
        unserved: list[str] = []
        reached = False
        errors = (PrometheusApiClientException, requests.RequestException, KeyError, ValueError,
                  TypeError, AttributeError, yaml.YAMLError)

        def failed(endpoint: str, e: Exception) -> None:
            nonlocal reached
            transport = isinstance(e, requests.RequestException) and not isinstance(
                e, requests.HTTPError)
            reached = reached or not transport
            unserved.append(f"{endpoint}: {type(e).__name__}: {self._reason(e, 200)}")

        try:
            targets = client.get_targets(state="active")
            reached = True
            found = interval_of_targets(targets.get("activeTargets", []), scope) if scope else None
            if found is not None:
                return found, "", True
        except errors as e:
            failed("/api/v1/targets", e)
        try:
            assert self._session is not None
            response = self._session.get(f"{client.url}/api/v1/status/config",
                                         headers=client.headers, timeout=self.config.timeout)
            response.raise_for_status()
            seconds = global_interval(response.json()["data"]["yaml"])
        except errors as e:
            failed("/api/v1/status/config", e)
            return None, "; ".join(unserved), reached
        where = "the global scrape_interval (/api/v1/status/config)"
        if scope:
            where += "; no active target matches the service's pods yet"
        return (seconds, where), "", True

    def _inferred_interval(self, scope: Sequence[Matcher], wider: Sequence[Matcher] | None
                           ) -> tuple[tuple[float, str] | None, str]:
        """The spacing of the ``up`` samples of ``scope``, else of ``wider``: PromQL alone, so
        any front end answers it. None, and why, when neither has two samples yet."""
        wide = tuple(m for m in scope if not m.regex) if wider is None else tuple(wider)
        scopes = [s for s in dict.fromkeys((tuple(scope), wide)) if s]
        if not scopes:
            return None, "no running pod of the service to select its up series by"
        tried = []
        for selected in scopes:
            query = f"timestamp(up{{{promql.render_selector(selected)}}})"
            found = self._spacing(query, SAMPLES_SPAN, SAMPLES_STEP)
            if isinstance(found, Unavailable):
                return None, found.reason
            if found is not None and found[0] < 2 * SAMPLES_STEP:
                finer = self._spacing(query, FINE_SPAN, FINE_STEP)
                found = finer if isinstance(finer, tuple) else found
            if found is not None:
                seconds, series = found
                return (seconds, f"inferred from the spacing of {query}'s samples ({series} "
                                 f"series, last {format_duration(SAMPLES_SPAN)}); the server "
                                 "reports no scrape interval"), ""
            tried.append(query)
        return None, (f"no series of {' or '.join(tried)} has two samples in the last "
                      f"{format_duration(SAMPLES_SPAN)}")

    def _spacing(self, query: str, span: float,
                 step: float) -> tuple[float, int] | Unavailable | None:
        end = self.clock.now()
        start = end - span
        try:
            result = self.client().custom_query_range(
                query, start_time=dt.datetime.fromtimestamp(start, dt.UTC),
                end_time=dt.datetime.fromtimestamp(end, dt.UTC), step=f"{step:g}",
                params={"start": f"{start:.3f}", "end": f"{end:.3f}"})
        except PrometheusApiClientException as e:
            return Unavailable(f"query rejected: {self._reason(e, 300)}")
        except requests.RequestException as e:
            return Unavailable(f"Prometheus unreachable: {type(e).__name__}: {self._reason(e)}")
        return spacing(result)

    def go_versions(self, scope: Sequence[Matcher]) -> list[str]:
        """The Go versions the service's pods report (client_golang's ``go_info``); empty when
        none does or Prometheus cannot say."""
        selector = promql.render_selector(tuple(scope))
        try:
            result = self.client().custom_query(f"count by (version) (go_info{{{selector}}})",
                                                params={"time": f"{self.clock.now():.3f}"})
        except (PrometheusApiClientException, requests.RequestException):
            return []
        return sorted({str(r.get("metric", {}).get("version")) for r in result or []
                       if isinstance(r, dict) and r.get("metric", {}).get("version")})

    def check_window(self, window: float, field: str = "measure.window") -> str | None:
        """Why ``window`` (the experiment's ``field``) is too short for the scrape interval in
        use, or None."""
        needed = 4 * self.scrape_interval
        if window >= needed:
            return None
        return (f"{field}: {format_duration(window)} is shorter than 4 scrape intervals "
                f"({format_duration(needed)}): Prometheus scrapes the service every "
                f"{format_duration(self.scrape_interval)} ({self.interval_source}), so rate() "
                "over the window would have too few samples; lengthen it")

    @property
    def _poll(self) -> float:
        """Our own Prometheus on loopback is polled often; an external one more gently."""
        if self.embedded is not None:
            return max(0.005, min(0.05, self.scrape_interval / 50))
        return max(0.01, min(0.2, self.scrape_interval / 2))

    def _reason(self, e: BaseException, limit: int | None = None) -> str:
        """A library's exception as a message: scrubbed of every credential, then cut short
        (never the reverse, or a cut password would no longer be recognised)."""
        return redaction.scrub(str(e), self._secrets)[:limit]

    def client(self) -> PrometheusConnect:
        if self._client is None:
            url = self.config.url or (self.embedded.start() if self.embedded else "")
            url, basic = redaction.split_userinfo(url)
            # A password next to a token is refused when the experiment is checked
            # (experiment.checks): each would set the Authorization header.
            headers, token = _auth_headers(self.config)
            secrets = (basic[1] if basic else None, token, *headers.values())
            self._secrets = tuple(s for s in secrets if s)
            session = requests.Session()
            session.verify = self.config.ca_file or self.config.verify_tls
            # Not in the URL: requests would keep it there, and quote it in its messages.
            session.auth = basic
            self._session = session
            # One quick HTTP-level retry: read() has its own retry of a failed query, and the
            # library's default (3 retries, backoff 1 s) spent 6 s per query on a dead server.
            # Not after a read timeout: that query already cost prometheus.timeout.
            retry = Retry(total=1, read=0, backoff_factor=0.2, status_forcelist=(502, 503, 504))
            self._client = PrometheusConnect(url=url, headers=headers, session=session,
                                             timeout=self.config.timeout, retry=retry)
            # Replaces the adapter the library mounted for this URL: the same retry, and the
            # whole answer within prometheus.timeout (the library's timeout restarts with each
            # byte read: a proxy trickling its answer held a trial forever).
            # Every scheme too: a redirect elsewhere must not escape the deadline.
            for prefix in (url, "http://", "https://"):
                session.mount(prefix, TotalDeadline(self.config.timeout, max_retries=retry))
        return self._client

    def _query(self, query: str, at: float) -> Reading:
        try:
            result = self.client().custom_query(query, params={"time": f"{at:.3f}"})
        except PrometheusApiClientException as e:
            return Unavailable(f"query rejected: {self._reason(e, 300)}")
        except requests.RequestException as e:
            return Unavailable(f"Prometheus unreachable: {type(e).__name__}: {self._reason(e)}")
        return interpret(result, query, at)

    def read_range(self, query: str, window: Window,
                   step: float) -> list[dict[str, Any]] | Unavailable:
        # Called after read(), so the window's data is already in (read waited for it).
        start = window.start + step
        try:
            result = self.client().custom_query_range(
                query, start_time=dt.datetime.fromtimestamp(start, dt.UTC),
                end_time=dt.datetime.fromtimestamp(window.end, dt.UTC), step=f"{step:g}",
                # the library rounds start and end to whole seconds; a window does not
                params={"start": f"{start:.3f}", "end": f"{window.end:.3f}"})
        except PrometheusApiClientException as e:
            return Unavailable(f"query rejected: {self._reason(e, 300)}")
        except requests.RequestException as e:
            return Unavailable(f"Prometheus unreachable: {type(e).__name__}: {self._reason(e)}")
        if not result:
            return Unavailable(f"no series for {query}")
        return list(result)

    def observe(self, live: Live) -> None:
        if self.embedded is None:
            self._ensure_interval(live)
            self._check_clock()
            self._await_pods_up(live)
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

    def _check_clock(self) -> None:
        """Refuse a Prometheus whose clock is off this host's by more than half a scrape
        interval (checked once). Windows are this host's times and the queries ask for them:
        a Prometheus ahead by 20 s would answer for a window 20 s before the stress, silently.
        Its own time is ``time()`` asked with no evaluation time; the round trip's half is the
        estimate's error, allowed for. Our private Prometheus shares this host's clock."""
        if self._clock_checked:
            return
        sent = self.clock.now()
        try:
            result = self.client().custom_query("time()")
        except (PrometheusApiClientException, requests.RequestException) as e:
            log.debug("Prometheus's clock not checked: %s", self._reason(e))
            return  # the reads that follow fail with the reason
        received = self.clock.now()
        theirs = interpret(result, "time()")
        if not isinstance(theirs, float):
            log.debug("Prometheus's clock not checked: %s", theirs.reason)
            return
        self._clock_checked = True
        offset = theirs - (sent + received) / 2
        tolerance = max(1.0, self.scrape_interval / 2)
        if abs(offset) > tolerance + (received - sent) / 2:
            side = "ahead of" if offset > 0 else "behind"
            raise MetricsError(
                f"Prometheus's clock is {abs(offset):.1f} s {side} this host's (more than half "
                f"its {self.scrape_interval:g} s scrape interval): "
                "every window would be read at the wrong time, off its stress. Synchronise the "
                "clocks (NTP; `timedatectl status` on each host)")

    def _ensure_interval(self, live: Live) -> None:
        """Learn the interval now if Prometheus did not answer when the run started (never
        assume one), and hold the window to it."""
        if self._learned is None and self._configured is None:
            self.learn_interval(live.scope)
        problem = self.check_window(self.window) if self.window is not None else None
        if problem is not None:
            raise MetricsError(problem)

    def _await_pods_up(self, live: Live) -> None:
        """An external Prometheus discovers new pods by itself (service discovery, then the next
        scrape): wait until each pod of the candidate, and of its load generator, has a
        successful scrape."""
        for scope, pods, what in ((live.scope, live.pods, "the candidate"),
                                  (live.load_scope, live.load_pods, "the load generator")):
            if pods:
                self._await_up(scope, pods, what)

    def _await_up(self, scope: Sequence[Matcher], pods: Sequence[str], what: str) -> None:
        selector = promql.render_selector(tuple(scope))
        query = f"count(count by (pod) (up{{{selector}}} == 1))"
        # Discovery (kubernetes_sd watches, a few seconds) plus up to two scrape intervals.
        timeout = 3 * self.scrape_interval + 30.0
        reading: Reading = Unavailable("not queried")

        def up() -> bool:
            nonlocal reading
            reading = self._query(query, self.clock.now())
            return isinstance(reading, float) and reading >= len(pods)

        wait_until(self.clock, up, timeout, self._poll, error=lambda _: MetricsError(
            f"Prometheus has no successful scrape (up == 1) of every pod of {what} "
            f"({', '.join(pods)}) after {timeout:g}s: "
            f"{reading if isinstance(reading, Unavailable) else f'{reading:g} pod(s) up'}; "
            "check its service discovery (annotations, PodMonitor or ServiceMonitor)"))

    def _await_scrape_after(self, live: Live, at: float) -> None:
        selector = promql.render_selector(live.scope)
        # The next scrape lands within one interval; allow for its duration and ingestion.
        timeout = max(10.0, 2 * self.scrape_interval + 10.0)

        last: Reading = Unavailable("not queried")

        def fresh() -> bool:
            nonlocal last
            last = self._query(f"min(timestamp(up{{{selector}}}))", self.clock.now())
            return isinstance(last, float) and last >= at

        def why() -> str:  # the cause, when Prometheus itself did not answer
            if isinstance(last, Unavailable):
                return last.reason
            return f"its last scrape was at {last:.3f}, the window ended at {at:.3f}"

        wait_until(self.clock, fresh, timeout, self._poll, error=lambda _: MetricsError(
            f"no scrape of the service after the window ended (waited {timeout:g}s): {why()}"))

    def _check_up_before(self, live: Live, at: float) -> None:
        """Every target had a successful scrape in the warm-up before ``at`` (so the window
        starts covered). Not "the last scrape before ``at`` succeeded": on a busy 2-core
        machine one scrape of a GOMAXPROCS=1 service under stress can time out (scrape_timeout
        is the 1 s interval), and the window's rate() does not need that one sample."""
        selector = promql.render_selector(live.scope)
        span = promql.render_window(max(self.warmup, 2 * self.scrape_interval))
        up = self._query(f"count(max_over_time(up{{{selector}}}[{span}]) == 1)", at)
        if up != len(live.endpoints):
            raise MetricsError(
                f"not every endpoint of the service was scraped successfully in the {span} "
                f"before the window started ({up if isinstance(up, float) else up.reason}; "
                f"{len(live.endpoints)} wanted): was the warm-up shorter than two scrape "
                "intervals, or did the service not answer its scrapes?")

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
