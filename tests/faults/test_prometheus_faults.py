"""A real Prometheus behind a fault proxy: every fault is a reason, never a number.

``PrometheusSource`` reads an external Prometheus (``prometheus.url`` is the proxy) that scrapes a
tiny exporter; the proxy breaks either the metric queries alone (``match``: the source's own
"was the service scraped after the window?" queries still pass, so the metric's own failure is
what the reason must name) or the whole server.
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.clock import SystemClock
from autotune.errors import StudyError
from autotune.experiment import Experiment, parse_experiment
from autotune.experiment.models import Prometheus
from autotune.live import Live, Matcher, Window
from autotune.metrics import promql
from autotune.metrics.base import Reading, Unavailable
from autotune.metrics.prometheus import PrometheusSource
from autotune.platforms.simulated import SimulatedInjector, SimulatedService, World
from autotune.study import storage as st
from autotune.study.journal import Journal
from autotune.study.loop import StudyRunner
from autotune.study.trial import Backends
from tests.faults.conftest import PROM_INTERVAL
from tests.faults.prom_proxy import Exporter, PrometheusProcess, PromProxy
from tests.support.waiting import until

pytestmark = [pytest.mark.faults, pytest.mark.integration]

SCOPE = (Matcher("job", "simulated"),)  # what SimulatedService's candidates are selected by
METRIC = "fault_requests_total"
RATE = "sum(rate(fault_requests_total{ {{selector}} }[{{window}}]))"


def _source(url: str, timeout: float = 1.0) -> PrometheusSource:
    return PrometheusSource(Prometheus(url=url, scrape_interval=PROM_INTERVAL, timeout=timeout),
                            SystemClock())


def _read(source: PrometheusSource, template: str = RATE, seconds: float = 1.0,
          end: float | None = None) -> Reading:
    """Read one metric for the window that ends now (or at ``end``), as a trial's read phase
    does."""
    end = time.time() if end is None else end
    window = Window(end - seconds, end)
    query = promql.render(template, {"selector": promql.render_selector(SCOPE),
                                     "window": promql.render_window(seconds)})
    live = Live(env={}, since=window.start - 1, scope=SCOPE)
    return source.read({"m": query}, window, live)["m"]


def test_through_the_proxy_the_rate_is_read(prom_proxy: PromProxy,
                                            prom_server: PrometheusProcess) -> None:
    end = time.time()
    reading = _read(_source(prom_proxy.url), end=end)
    direct = _read(_source(prom_server.url), end=end)  # the same window, without the proxy
    assert isinstance(reading, float) and reading == direct, "passed through unaltered"
    # a real rate of the exporter's 100/s: 5 scrapes in 1 s on a busy CI machine were 113
    assert reading == pytest.approx(100, rel=0.5)
    assert any(METRIC in s.params.get("query", "") for s in prom_proxy.seen)


# --- a fault in the metric's own query -----------------------------------------------------------

@pytest.mark.parametrize("mode, words", [
    ("nan", ["nan"]),
    ("empty", ["no series", METRIC]),
    ("several", ["2 series", "replica"]),
    ("5xx", ["503"]),
    ("slow", ["timed out"]),
])
def test_a_broken_metric_query_is_unavailable_with_its_reason(
        prom_proxy: PromProxy, mode: str, words: list[str]) -> None:
    prom_proxy.slow_seconds = 3.0
    prom_proxy.set(mode, match=METRIC)
    reading = _read(_source(prom_proxy.url, timeout=0.5))
    assert any(s.fault == mode for s in prom_proxy.seen), "the fault was injected"
    assert isinstance(reading, Unavailable), reading
    for word in words:
        assert word.lower() in reading.reason.lower(), reading.reason


def _require(condition: bool, what: str) -> None:
    """A precondition of a test: a RuntimeError, so that a broken setup fails the test
    instead of passing for the expected failure (those are ``raises=AssertionError``)."""
    if not condition:
        raise RuntimeError(what)


def test_a_stale_answer_is_not_taken_for_the_window(
        prom_proxy: PromProxy, prom_exporter: Exporter) -> None:
    """The window saw ``fault_gauge`` at 2; an answer evaluated 2 s too early says 1."""
    source = _source(prom_proxy.url)
    query = "max_over_time(fault_gauge{ {{selector}} }[{{window}}])"
    prom_exporter.gauge = 1.0
    # Prometheus has had 1 for a while: the 1 s window that ended 2 s ago saw 1.
    until("fault_gauge scraped at 1 for 2 s",
          lambda: _read(source, query, end=time.time() - 2.0) == 1.0, timeout=10,
          every=PROM_INTERVAL)
    prom_exporter.gauge = 2.0

    def both_windows() -> float | None:
        end = time.time()  # this window saw 2; the one 2 s before it, 1
        return end if (_read(source, query, end=end) == 2.0
                       and _read(source, query, end=end - 2.0) == 1.0) else None

    end = until("fault_gauge scraped at 2", both_windows, timeout=10, every=PROM_INTERVAL)
    _require(_read(source, query, end=end) == 2.0, "the window's own value is read")
    prom_proxy.stale_seconds = 2.0
    prom_proxy.set("stale", match="fault_gauge")
    reading = _read(source, query, end=end)
    _require(any(s.fault == "stale" for s in prom_proxy.seen), "the fault was injected")
    assert isinstance(reading, Unavailable), f"{reading} read for a window that saw 2"
    assert "stale" in reading.reason


def test_a_slow_prometheus_costs_a_read_about_twice_the_timeout(prom_proxy: PromProxy) -> None:
    prom_proxy.slow_seconds = 10.0
    prom_proxy.set("slow", match=METRIC)
    t0 = time.monotonic()
    reading = _read(_source(prom_proxy.url, timeout=1.0))
    seconds = time.monotonic() - t0
    _require(isinstance(reading, Unavailable) and "timed out" in reading.reason, str(reading))
    # One query and the one retry, a scrape interval apart, plus the freshness check.
    assert seconds < 2 * 1.0 + 1.5, f"prometheus.timeout 1s, the read took {seconds:.1f}s"


# --- the whole server broken --------------------------------------------------------------------

OUTAGES = {"down": ["unreachable", "refused"], "5xx": ["503"], "slow": ["timed out"]}


@pytest.fixture(scope="module")
def outage_readings(prom_server: PrometheusProcess) -> dict[str, tuple[Reading, float, int]]:
    """Each outage's reading, its duration and the requests the proxy saw. The source waits
    10 s for a scrape it cannot see through an outage, so the three run side by side."""

    def one(mode: str) -> tuple[Reading, float, int]:
        with PromProxy(prom_server.url, slow_seconds=5.0) as proxy:
            proxy.set(mode)
            t0 = time.monotonic()
            reading = _read(_source(proxy.url, timeout=0.5))
            return reading, time.monotonic() - t0, len(proxy.seen)

    with ThreadPoolExecutor(len(OUTAGES)) as pool:
        return dict(zip(OUTAGES, pool.map(one, OUTAGES), strict=True))


@pytest.mark.parametrize("mode", list(OUTAGES))
def test_an_outage_is_never_a_number_and_ends(
        outage_readings: dict[str, tuple[Reading, float, int]], mode: str) -> None:
    reading, seconds, _ = outage_readings[mode]
    assert isinstance(reading, Unavailable), reading
    assert seconds < 20, f"the read gave up after {seconds:.1f}s"


@pytest.mark.parametrize("mode", OUTAGES)
def test_an_outage_names_its_cause(
        outage_readings: dict[str, tuple[Reading, float, int]], mode: str) -> None:
    reading = outage_readings[mode][0]
    assert isinstance(reading, Unavailable)
    assert any(word in reading.reason.lower() for word in OUTAGES[mode]), reading.reason


# --- a study through the real loop --------------------------------------------------------------

STUDY = """
name: prom-faults
target:
  simulated:
    optimum: {GOMAXPROCS: 2, gc: 500}
    unset: {GOMAXPROCS: 8, gc: 0}
    state_file: WORLD
parameters:
  - {name: GOMAXPROCS, type: int, low: 1, high: 16}
  - {name: gc, env: FORCEGC_INTERVAL_MS, type: int, values: [0, 100, 500, 2000]}
baseline: {repeats: 1, params: {GOMAXPROCS: null, gc: 0}}
chaos: {stress: {workers: 1, load: 10}}
prometheus: {url: URL, scrape_interval: 0.2s, timeout: 0.5s}
measure: {warmup: 0.2s, window: 1s}
metrics:
  p99: 'sum(rate(fault_requests_total{ {{selector}} }[{{window}}]))'
  up: 'sum(up{ {{selector}} })'
objective: {minimize: p99}
study: {trials: 10, sampler: random, seed: 1, stop_after_failures: 3}
"""

# The fault each trial meets, in the order trials start (the baseline first).
SCRIPT = ["pass", "nan", "pass", "5xx", "empty", "several"]
REASONS = {"nan": "nan", "5xx": "503", "empty": "no series", "several": "2 series"}


class FaultScript:
    """The loop's progress listener, switching the proxy's fault as each trial starts."""

    def __init__(self, proxy: PromProxy) -> None:
        self.proxy, self.started = proxy, 0

    def study_started(self, info: dict[str, Any]) -> None: ...

    def trial_started(self, number: int, kind: str, settings: dict[str, Any]) -> None:
        mode = SCRIPT[self.started] if self.started < len(SCRIPT) else "pass"
        self.started += 1
        self.proxy.set(mode, match=METRIC)

    def phase(self, name: str) -> None: ...

    def trial_finished(self, record: dict[str, Any], best: dict[str, Any] | None) -> None: ...


def _experiment(tmp: Path, url: str) -> Experiment:
    return parse_experiment(STUDY.replace("WORLD", str(tmp / "world.json")).replace("URL", url))


def test_faulted_trials_fail_with_their_reason_and_the_study_stops(
        prom_proxy: PromProxy, tmp_path: Path) -> None:
    exp = _experiment(tmp_path, prom_proxy.url)
    clock = SystemClock()
    world = World(tmp_path / "world.json")
    backends = Backends(target=SimulatedService(exp, world, clock),
                        injector=SimulatedInjector(world, clock),
                        source=PrometheusSource(exp.prometheus, clock))
    script = FaultScript(prom_proxy)
    runner = StudyRunner(exp, backends, clock=clock, progress=script,
                         journal=Journal(tmp_path / "trials.jsonl"), experiment_hash="test")
    url = f"sqlite:///{tmp_path}/study.db"
    with pytest.raises(StudyError) as stopped:
        runner.run(st.open_for_run(exp, url), exp.study.trials)

    records = [json.loads(line) for line in (tmp_path / "trials.jsonl").read_text().splitlines()]
    assert len(records) == len(SCRIPT), "the study went on after one failure, stopped after 3"
    for mode, record in zip(SCRIPT, records, strict=True):
        if mode == "pass":
            assert record["state"] == "COMPLETE", record.get("failure")
            # the exporter's 100/s over a 1 s window: scrape jitter on a busy machine is +-15%
            assert record["metrics"]["p99"] == pytest.approx(100, rel=0.5)
            continue
        assert record["state"] == "FAIL"
        assert "p99" not in record["metrics"], "never a number"
        assert REASONS[mode] in record["unavailable"]["p99"].lower()
        assert re.match(r"read: p99 unavailable: ", record["failure"]), record["failure"]
        assert record["metrics"]["up"] == 1.0, "the other metric was read all the same"
    message = str(stopped.value)
    assert "3 trials in a row failed" in message and "2 series" in message, message

    studies = st.open_existing(exp, url)
    trials = sorted((*studies.reference.get_trials(), *studies.search.get_trials()),
                    key=lambda t: float(t.user_attrs["record"]["started"]))
    states = [t.state for t in trials]
    assert states == [optuna.trial.TrialState.COMPLETE if m == "pass"
                      else optuna.trial.TrialState.FAIL for m in SCRIPT]
    for mode, trial in zip(SCRIPT, trials, strict=True):
        if mode != "pass":
            assert REASONS[mode] in trial.user_attrs["failure"].lower()
