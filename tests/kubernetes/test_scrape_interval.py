"""Issue 9.1 against a real Prometheus that scrapes every 30 s, like kube-prometheus-stack.

A fake exporter stands in for two pods (labels ``namespace``/``pod`` as the usual
``kubernetes-pods`` relabelling produces them). The failure first: a source that assumes 1 s
gives up waiting for the scrape after the window. Then the learned interval makes the same read
succeed, and a new pod is waited for until Prometheus scrapes it.

Then a query front end (Thanos Query, Mimir, a managed Prometheus): the fault proxy answers 404
for ``/api/v1/targets`` and ``/api/v1/status/config`` in front of a real Prometheus scraping one
namespace every 15 s and another every 30 s. The interval is inferred from the spacing of the
``up`` samples, and the window rule uses it; where nothing can be inferred, the run is refused
with the field to set, never run at the private Prometheus's 1 s.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from autotune.clock import SystemClock
from autotune.errors import AutotuneError, ExperimentError, MetricsError
from autotune.experiment import Experiment, parse_experiment
from autotune.experiment.models import Prometheus
from autotune.live import Live, Matcher, Window
from autotune.metrics.base import Unavailable
from autotune.metrics.prometheus import PrometheusSource
from autotune.platforms.kubernetes import stack
from autotune.platforms.local.prometheus import EmbeddedPrometheus
from tests.faults.prom_proxy import Exporter, PrometheusProcess, PromProxy

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
    # Not learned: the 1 s that an unset prometheus.scrape_interval used to mean.
    config = (Prometheus(url=cluster.prometheus.url) if learn
              else Prometheus(url=cluster.prometheus.url, scrape_interval=1.0))
    source = PrometheusSource(config, SystemClock())
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
    # The defect: assuming 1 s, the wait for a newer scrape gives up (12 s).
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



# --- a query front end: the interval inferred from the samples --------------------------------

FAST, SLOW = 15.0, 30.0
HIDDEN = ("/api/v1/targets", "/api/v1/status/config")
REPLICAS = 8
"""Pods per namespace: each target's first scrape comes at its own offset within the interval,
so with 8 the earliest comes within ~1/9 of it and the test needs about one interval plus that."""

FRONT_END_EXPERIMENT = """
name: front-end
target:
  kubernetes: {{namespace: {namespace}, deployment: api, container: api}}
parameters:
  - {{name: GOMAXPROCS, type: int, values: [2, 4]}}
baseline: {{repeats: 1, params: {{GOMAXPROCS: null}}}}
chaos: {{stress: {{workers: 1, load: 100}}}}
prometheus: {{url: "{url}"{configured}}}
measure: {{warmup: 10s, window: {window}, load: {{metric: rps, tolerance: 0.1}}}}
metrics:
  rps: 'sum(rate(fault_requests_total{{ {{{{selector}}}} }}[{{{{window}}}}]))'
objective: {{minimize: rps}}
"""


class _Pods:
    """What ``_source`` asks of the Deployment target: the running pods' scope, if any."""

    def __init__(self, namespace: str, pods: str | None) -> None:
        self.namespace, self.pods = namespace, pods
        self.facts: dict[str, Any] = {}

    def current(self) -> Live:
        if self.pods is None:
            raise AutotuneError("no running pod")
        return Live(env={}, since=time.time(), scope=(
            Matcher("namespace", self.namespace), Matcher("pod", self.pods, True)))


def _job(name: str, interval: float, address: str) -> dict[str, Any]:
    every = f"{interval:g}s"
    return {"job_name": name, "scrape_interval": every, "scrape_timeout": "5s",
            "static_configs": [{"targets": [address],
                                "labels": {"namespace": name, "pod": f"api-{i}",
                                           "__metrics_path__": f"/{name}/{i}/metrics"}}
                               for i in range(REPLICAS)]}


@pytest.fixture(scope="module", autouse=True)
def front_end(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromProxy]:
    """A Prometheus scraping namespace ``fast`` every 15 s and ``slow`` every 30 s, behind a
    proxy that hides the two endpoints that report the interval. Started with the module (the
    tests above wait for 30 s scrapes too): its two 30 s scrapes are there by its test."""
    exporter = Exporter()
    server: PrometheusProcess | None = None
    try:
        server = PrometheusProcess(
            tmp_path_factory.mktemp("front-end"), {}, interval=60.0,
            scrape_configs=[_job("fast", FAST, exporter.address),
                            _job("slow", SLOW, exporter.address)])
        with PromProxy(server.url, hidden=HIDDEN) as proxy:
            yield proxy
    finally:
        if server is not None:
            server.stop()
        exporter.stop()


def _experiment(url: str, namespace: str, window: str, configured: str = "") -> Experiment:
    return parse_experiment(FRONT_END_EXPERIMENT.format(
        url=url, namespace=namespace, window=window, configured=configured))


def _inferred(url: str, namespace: str, timeout: float) -> tuple[PrometheusSource, float]:
    """The source once the namespace's pods have been scraped twice (so the spacing exists),
    and when that was (monotonic)."""
    deadline = time.monotonic() + timeout
    scope = (Matcher("namespace", namespace), Matcher("pod", "api-.*", True))
    while True:
        source = PrometheusSource(Prometheus(url=url), SystemClock())
        try:
            source.learn_interval(scope)
            return source, time.monotonic()
        except MetricsError as e:
            assert "has two samples" in str(e), e  # only "not yet", nothing else
            assert time.monotonic() < deadline, f"no interval after {timeout:g}s: {e}"
        time.sleep(0.5)


def test_a_front_end_interval_is_inferred_from_the_samples(front_end: PromProxy) -> None:
    started = time.monotonic()
    url = front_end.url
    # Nothing scraped there yet, no interval set: refused, naming the field, not run at 1 s.
    with pytest.raises(ExperimentError) as refused:
        stack._source(_experiment(url, "nowhere", "2m"), SystemClock(), _Pods("nowhere", "api-0"))
    assert str(refused.value).startswith("prometheus.scrape_interval: not set"), refused.value
    assert "set it to the interval at which the service is scraped" in str(refused.value)
    assert {s.path: s.fault for s in front_end.seen if s.path in HIDDEN} == {
        path: "hidden" for path in HIDDEN}, "both endpoints were asked, and answered 404"
    # A value the experiment sets is used as given (a fact about the server, not a guess).
    configured = stack._source(_experiment(url, "nowhere", "2m", ", scrape_interval: 20s"),
                         SystemClock(), _Pods("nowhere", "api-0"))
    assert configured.scrape_interval == 20.0
    assert configured.interval_source == "prometheus.scrape_interval (configured)"

    fast, fast_at = _inferred(url, "fast", timeout=3 * FAST)
    slow, slow_at = _inferred(url, "slow", timeout=3 * SLOW)
    assert fast.scrape_interval == pytest.approx(FAST, abs=0.05)
    assert slow.scrape_interval == pytest.approx(SLOW, abs=0.05)
    assert slow.interval_source.startswith(
        'inferred from the spacing of timestamp(up{namespace="slow",pod=~"api-.*"})\'s samples')

    # The window rule with the inferred interval: 1 m is 4 scrapes at 15 s, not at 30 s.
    with pytest.raises(ExperimentError) as short:
        stack._source(_experiment(url, "slow", "1m"), SystemClock(), _Pods("slow", "api-1|api-2"))
    assert str(short.value).startswith(
        "measure.window: 60s is shorter than 4 scrape intervals (2m00s): Prometheus scrapes "
        "the service every 30s (inferred from the spacing"), short.value
    assert stack._source(_experiment(url, "fast", "1m"), SystemClock(),
                   _Pods("fast", "api-1")).scrape_interval == pytest.approx(FAST, abs=0.05)
    # New pods without a sample yet, or none running: the namespace's other pods tell.
    for pods in ("api-new", None):
        source = stack._source(_experiment(url, "slow", "2m"), SystemClock(), _Pods("slow", pods))
        assert source.scrape_interval == pytest.approx(SLOW, abs=0.05)
        assert 'timestamp(up{namespace="slow"})' in source.interval_source
    print(f"inferred 15 s after {fast_at - started:.1f}s, 30 s after {slow_at - started:.1f}s, "
          f"test {time.monotonic() - started:.1f}s")


def test_a_server_that_does_not_answer_at_start_is_asked_at_the_first_trial(
        front_end: PromProxy) -> None:
    """Not refused (a Prometheus restarting when the run starts fails trials, as any query
    would), and not run at 1 s: the first trial that reaches it learns the interval."""
    pods = _Pods("slow", "api-1")
    with front_end.fault("down"):
        short = stack._source(_experiment(front_end.url, "slow", "1m"), SystemClock(), pods)
        enough = stack._source(_experiment(front_end.url, "slow", "2m"), SystemClock(), pods)
        with pytest.raises(MetricsError, match="the scrape interval of Prometheus is not known"):
            _ = enough.scrape_interval
        with pytest.raises(MetricsError, match="cannot ask Prometheus how often it scrapes"):
            enough.observe(pods.current())
    live = replace(pods.current(), pods=("api-1",))
    _inferred(front_end.url, "slow", timeout=3 * SLOW)  # two scrapes (run alone: ~40 s)
    started = time.monotonic()
    enough.observe(live)
    assert enough.scrape_interval == pytest.approx(SLOW, abs=0.05)
    with pytest.raises(MetricsError, match=r"^measure.window: 60s is shorter than 4 scrape"):
        short.observe(live)
    assert time.monotonic() - started < 10
