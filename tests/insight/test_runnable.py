"""The run queues without schedtrace: Go >= 1.26's runnable-goroutines gauge, read over the
window per process, through the overflow detector; the busiest process is kept."""

from __future__ import annotations

from typing import Any

from autotune.experiment import parse_experiment
from autotune.live import Window
from autotune.metrics.base import Unavailable
from autotune.report.scheduler import _queues
from autotune.study.diagnostics import RUNNABLE, runnable_queues

EXPERIMENT = """
name: runnable
target: {simulated: {optimum: {GOMAXPROCS: 2}}}
parameters: [{name: GOMAXPROCS, type: int, values: [1, 2]}]
chaos: {stress: {workers: 1, load: 50}}
measure: {warmup: 1s, window: 10s}
metrics: {p99: surface}
objective: {minimize: p99}
"""
WINDOW = Window(1000.0, 1010.0)


class Ranges:
    """A RangeSource answering from fixed series (Prometheus' matrix format)."""

    scrape_interval = 1.0

    def __init__(self, answers: dict[str, list[dict[str, Any]] | Unavailable]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, float]] = []

    def read_range(self, query: str, window: Window,
                   step: float) -> list[dict[str, Any]] | Unavailable:
        self.asked.append((query, step))
        for prefix, answer in self.answers.items():
            if query.startswith(prefix) or query.startswith(f"max({prefix}"):
                return answer
        return Unavailable(f"no series for {query}")


def _series(pod: str, values: list[float]) -> dict[str, Any]:
    return {"metric": {"pod": pod},
            "values": [[1001.0 + i, str(v)] for i, v in enumerate(values)]}


def test_the_busiest_pod_is_kept_and_its_overflow_found() -> None:
    exp = parse_experiment(EXPERIMENT)
    calm = _series("api-a", [3, 5, 4, 6, 2, 3, 4, 5, 3])
    busy = _series("api-b", [10, 400, 700, 650, 900, 800, 40, 20, float("nan")])
    source = Ranges({RUNNABLE: [calm, busy],
                     "go_sched_gomaxprocs_threads": [_series("x", [2] * 9)]})
    got = runnable_queues(exp, source, 'pod=~"api-a|api-b"', WINDOW)
    assert isinstance(got, dict)
    assert got["source"] == f"{RUNNABLE} api-b"
    assert got["series"]["runnable"] == [10, 400, 700, 650, 900, 800, 40, 20]  # NaN dropped
    assert got["summary"] == {"runq_total_p999": 900.0, "samples": 8.0}
    # 128 x GOMAXPROCS 2 = 256; steps of 1.5 scrapes; 400..800 held from t=2 s to t=6 s
    overflow = got["overflow"]
    assert overflow["threshold"] == 256 and overflow["fired"] and overflow["count"] == 1
    assert overflow["longest"] >= 3.0
    assert all(step == 1.0 for _, step in source.asked)
    assert _queues({"insight": {"runnable": got}}) is got


def test_a_service_without_the_gauge_says_which_go_exports_it() -> None:
    exp = parse_experiment(EXPERIMENT)
    got = runnable_queues(exp, Ranges({}), 'job="x"', WINDOW)
    assert isinstance(got, str) and "no series" in got and "Go 1.26" in got
    assert _queues({"insight": {"unavailable": {"runnable": got}}}) is None


def test_schedtrace_comes_first_in_the_report() -> None:
    traced = {"overflow": {"count": 0}, "summary": {"runq_total_p999": 3.0}}
    gauge = {"overflow": {"count": 1}, "summary": {"runq_total_p999": 900.0}}
    assert _queues({"schedtrace": traced, "insight": {"runnable": gauge}}) is traced
