"""The local platform's decisions, without starting anything: the load calibration, cpusets on a
fake cgroup tree, the private Prometheus's target file, the waits of the Prometheus source (on a
FakeClock), and the service's choice of ports per generation."""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from autotune.clock import FakeClock
from autotune.errors import TargetError
from autotune.experiment import parse_experiment
from autotune.experiment.models import Prometheus
from autotune.live import Live, Matcher, Window
from autotune.metrics.base import Reading, Unavailable
from autotune.metrics.prometheus import RETRY_PAUSE, PrometheusSource
from autotune.platforms.local import calibrate, cgroups, proc
from autotune.platforms.local.prometheus import EmbeddedPrometheus
from autotune.platforms.local.service import (
    GENERATION_LABEL,
    LOADGEN_JOB,
    SERVICE_JOB,
    LocalService,
)

# --- load calibration -----------------------------------------------------------------------

METRICS = """# HELP loadgen_request_duration_seconds x
# TYPE loadgen_request_duration_seconds histogram
loadgen_request_duration_seconds_bucket{le="0.001"} 10
loadgen_request_duration_seconds_bucket{le="0.01"} 95
loadgen_request_duration_seconds_bucket{le="0.1"} 100
loadgen_request_duration_seconds_bucket{le="+Inf"} 100
loadgen_request_duration_seconds_sum 0.5
loadgen_request_duration_seconds_count 100
loadgen_requests_total{outcome="ok"} 98
loadgen_requests_total{outcome="error"} 1
loadgen_requests_total{outcome="dropped"} 1
loadgen_requests_scheduled_total 101
"""


def test_counters_are_parsed_from_the_loadgen_metrics() -> None:
    c = calibrate.parse_counters(METRICS)
    assert (c.scheduled, c.ok, c.failed) == (101, 98, 2)
    assert c.buckets == ((0.001, 10), (0.01, 95), (0.1, 100), (math.inf, 100))
    with pytest.raises(ValueError, match="loadgen_requests_scheduled_total"):
        calibrate.parse_counters("up 1\n")


def test_p99_is_the_bucket_bound_holding_it_over_the_difference() -> None:
    zero = calibrate.Counters(0, 0, 0, ((0.001, 0), (0.01, 0), (0.1, 0), (math.inf, 0)))
    after = calibrate.parse_counters(METRICS)
    assert calibrate.p99_between(zero, after) == 0.1  # 95 of 100 below 10 ms: p99 above
    assert calibrate.p99_between(after, after) is None  # nothing completed in between


def _step(rate: float, ok_ratio: float = 1.0, p99: float | None = 0.005,
          failed: float = 0) -> calibrate.Step:
    return calibrate.Step(rate, 1.0, rate, rate * ok_ratio, failed, p99)


def test_a_step_is_stable_only_if_it_keeps_up_without_errors_and_with_a_low_p99() -> None:
    assert _step(100).problem() is None
    assert "completed ok" in (_step(100, ok_ratio=0.9).problem() or "")
    assert "failed" in (_step(100, ok_ratio=0.98, failed=2).problem() or "")
    assert "p99" in (_step(100, p99=calibrate.P99_MAX * 2).problem() or "")
    assert "p99" in (_step(100, p99=None).problem() or "")
    assert calibrate.Step(100, 1.0, 0, 0, 0, None).problem() == "no request was due"


def test_capacity_is_the_best_stable_rate_below_every_unstable_one() -> None:
    assert calibrate.capacity([_step(50), _step(100), _step(200, 0.8), _step(150)]) == 150
    # a stable step above an unstable one does not count (noise, or a lucky second)
    assert calibrate.capacity([_step(50), _step(100, 0.5), _step(200)]) == 50
    assert calibrate.capacity([_step(50, 0.5)]) is None
    assert calibrate.capacity([]) is None


def test_next_rate_doubles_then_narrows_the_gap() -> None:
    assert calibrate.next_rate([]) == calibrate.START_RATE
    assert calibrate.next_rate([_step(50), _step(100)]) == 200
    # unstable at 800, achieving 700: probe just below what it achieved
    over = calibrate.Step(800, 1.0, 800, 700, 0, 0.5)
    assert calibrate.next_rate([_step(400), over]) == round(0.97 * 700)
    # achieved rate useless (inside no gap): the geometric middle
    useless = calibrate.Step(800, 1.0, 800, 100, 0, 0.5)
    assert calibrate.next_rate([_step(400), useless]) == round(math.sqrt(400 * 800))
    assert calibrate.next_rate([_step(760), useless]) is None  # within 10 %
    assert calibrate.next_rate([_step(50, 0.5)]) == 25  # even the start was too much


def _model_service(clock: FakeClock, capacity: float) -> Any:
    def step(rate: float) -> calibrate.Step:
        clock.sleep(calibrate.SETTLE + calibrate.SPAN)
        ok = min(rate, capacity)
        return calibrate.Step(rate, 1.0, rate, ok, 0, 0.004 if rate <= capacity else 0.5)

    return step


@pytest.mark.parametrize("true_capacity", [90.0, 734.0, 3000.0])
def test_calibration_finds_the_capacity_within_its_budget(true_capacity: float) -> None:
    clock = FakeClock()
    result = calibrate.run(_model_service(clock, true_capacity), clock, fraction=0.5)
    assert result.capacity is not None and result.rate is not None
    assert true_capacity / (1 + calibrate.PRECISION) <= result.capacity <= true_capacity
    assert result.rate == round(0.5 * result.capacity)
    assert result.seconds <= calibrate.BUDGET
    assert not result.problem and not result.note
    record = result.record()
    assert record["capacity"] == result.capacity and record["steps"][0]["rate"] == 50


def test_calibration_without_a_stable_rate_says_why_instead_of_a_number() -> None:
    clock = FakeClock()
    result = calibrate.run(_model_service(clock, 1.0), clock, fraction=0.5)
    assert result.capacity is None and result.rate is None
    assert "no stable rate" in result.problem and "completed ok" in result.problem


def test_calibration_that_never_overloads_says_its_capacity_is_a_lower_bound() -> None:
    clock = FakeClock()
    result = calibrate.run(_model_service(clock, 1e9), clock, fraction=0.5,
                           budget=5 * (calibrate.SETTLE + calibrate.SPAN))
    assert result.capacity == 50 * 2 ** 4 and "at least" in result.note


def test_calibration_step_failure_is_a_problem_not_a_number() -> None:
    def broken(rate: float) -> calibrate.Step:
        raise calibrate.StepFailed("the service exited")

    result = calibrate.run(broken, FakeClock(), fraction=0.5)
    assert result.rate is None and result.problem == "the service exited"


# --- cgroups and cpusets on a fake tree -------------------------------------------------------

def _v1_tree(root: Path, cpus: str = "0-3") -> Path:
    for name, files in {"cpu": ["cpu.cfs_quota_us", "cgroup.procs"],
                        "cpuacct": ["cpuacct.usage", "cgroup.procs"],
                        "cpuset": ["cpuset.cpus", "cpuset.mems", "cpuset.effective_cpus",
                                   "cpuset.effective_mems", "cgroup.procs"]}.items():
        (root / name).mkdir(parents=True)
        for f in files:
            (root / name / f).write_text("")
    (root / "cpuset" / "cpuset.effective_cpus").write_text(cpus + "\n")
    (root / "cpuset" / "cpuset.effective_mems").write_text("0\n")
    return root


def _kernel_rmdir_semantics(root: Path, name: str) -> None:
    """A real cgroupfs lets rmdir remove a group's pseudo-files; on a plain tree, drop them."""
    for path in root.glob(f"*/{name}/**/*"):
        if path.is_file():
            path.unlink()


@pytest.fixture
def four_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1, 2, 3})


def test_cpu_lists() -> None:
    assert cgroups.parse_cpu_list("0-2,4\n") == [0, 1, 2, 4]
    assert cgroups.parse_cpu_list("") == []
    assert cgroups.format_cpu_list([3, 1, 2]) == "1,2,3"


def test_the_tools_get_one_cpu_and_the_service_keeps_more_than_its_quota() -> None:
    assert cgroups.split_cpus([0, 1, 2, 3], 1.0) == ([1, 2, 3], [0])
    assert cgroups.split_cpus([2, 3, 4], 1.0) == ([3, 4], [2])
    assert "need 3" in str(cgroups.split_cpus([0, 1], 1.0))
    assert "need 4" in str(cgroups.split_cpus([0, 1, 2], 1.5))
    # asked for explicitly, the tight layout: no more CPUs than the quota
    assert cgroups.split_cpus([0, 1], 1.0, tight=True) == ([1], [0])
    assert "need 2" in str(cgroups.split_cpus([0], 1.0, tight=True))


def test_v1_cpuset_gives_the_service_its_own_cpus_parent_first(
        tmp_path: Path, four_cpus: None, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _v1_tree(tmp_path)
    mode = cgroups.detect(root)
    assert (mode.kind, mode.cpuset_root) == ("v1", root / "cpuset")
    monkeypatch.setattr(cgroups, "_own_cpuset", lambda _: "/")
    limit = cgroups.CpuLimit(mode, 1.0, "autotune-t-1", want_cpuset=True, clock=FakeClock())
    assert limit.isolation == "cpuset"
    assert (limit.service_cpus, limit.tools_cpus, limit.note) == ([1, 2, 3], [0], "")
    limit.create()
    base = root / "cpuset" / "autotune-t-1"
    assert (base / "cpuset.cpus").read_text() == "0,1,2,3"
    assert (base / "service" / "cpuset.cpus").read_text() == "1,2,3"
    assert (base / "tools" / "cpuset.cpus").read_text() == "0"
    for d in (base, base / "service", base / "tools"):
        assert (d / "cpuset.mems").read_text() == "0"
    assert (root / "cpu" / "autotune-t-1" / "service" / "cpu.cfs_quota_us").read_text() == \
        "100000"
    # the service joins all three hierarchies; autotune itself went to the tools cpuset
    assert limit.procs_files("service") == [
        str(root / h / "autotune-t-1" / "service" / "cgroup.procs")
        for h in ("cpu", "cpuacct", "cpuset")]
    assert (base / "tools" / "cgroup.procs").read_text() == str(os.getpid())
    assert limit.facts() == {"isolation": "cpuset", "cgroup_version": "v1",
                             "service_cpus": [1, 2, 3], "tools_cpus": [0],
                             "autotune_in_tools": True}
    _kernel_rmdir_semantics(root, "autotune-t-1")
    assert limit.remove() == []
    assert (root / "cpuset" / "cgroup.procs").read_text() == str(os.getpid())
    assert list(root.glob("*/autotune-t-1")) == []


def test_cpuset_falls_back_to_the_quota_with_the_reason(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    root = _v1_tree(tmp_path, cpus="0-1")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1})
    mode = cgroups.detect(root)
    # auto on 2 CPUs: a 1-CPU cpuset would change what is measured, so the quota alone
    limit = cgroups.CpuLimit(mode, 1.0, "autotune-t-2", want_cpuset=True)
    assert limit.isolation == "cgroup" and "need 3" in limit.note
    assert not [p for p in limit.procs_files("service") if p.startswith(str(root / "cpuset"))]
    # isolation: cpuset takes it anyway, and says what it costs
    tight = cgroups.CpuLimit(mode, 1.0, "autotune-t-2", want_cpuset=True, tight_cpuset=True)
    assert tight.isolation == "cpuset" and (tight.service_cpus, tight.tools_cpus) == ([1], [0])
    assert "cannot throttle" in tight.note and tight.facts()["isolation_note"] == tight.note
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0})
    one = cgroups.CpuLimit(mode, 1.0, "autotune-t-2", want_cpuset=True, tight_cpuset=True)
    assert one.isolation == "cgroup" and "need 2" in one.note
    no_cpuset = cgroups.Mode("v1", root / "cpu", root / "cpuacct",
                             cpuset_reason="cgroup v1: no cpuset hierarchy")
    limit = cgroups.CpuLimit(no_cpuset, 1.0, "autotune-t-3", want_cpuset=True)
    assert limit.isolation == "cgroup"
    assert limit.facts()["isolation_note"] == no_cpuset.cpuset_reason
    assert cgroups.CpuLimit(mode, 1.0, "x").isolation == "cgroup"


def test_v2_cpuset_is_written_in_the_same_groups(tmp_path: Path, four_cpus: None) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory\n")
    (tmp_path / "cgroup.subtree_control").write_text("cpu cpuset\n")
    (tmp_path / "cpuset.cpus.effective").write_text("0-3\n")
    mode = cgroups.detect(tmp_path)
    assert (mode.kind, mode.cpuset_root) == ("v2", tmp_path)
    limit = cgroups.CpuLimit(mode, 1.5, "autotune-t-4", want_cpuset=True, clock=FakeClock())
    (tmp_path / "autotune-t-4").mkdir()
    (tmp_path / "autotune-t-4" / "cgroup.subtree_control").write_text("")
    limit.create()
    base = tmp_path / "autotune-t-4"
    assert (base / "cgroup.subtree_control").read_text() == "+cpu +cpuset"
    assert (base / "service" / "cpuset.cpus").read_text() == "1,2,3"
    assert (base / "tools" / "cpuset.cpus").read_text() == "0"
    assert (base / "service" / "cpu.max").read_text() == "150000 100000"
    assert limit.procs_files("tools") == [str(base / "tools" / "cgroup.procs")]
    assert limit.joined_from is None  # v2: autotune stays put (its CPU accounting would move)


def test_a_dead_runs_cpuset_is_found_and_removed(tmp_path: Path) -> None:
    root = _v1_tree(tmp_path)
    (root / "cpuset" / "autotune-t-999999999" / "tools").mkdir(parents=True)
    stale = cgroups.stale("autotune-t", cgroups.detect(root))
    assert [s.name for s in stale] == ["autotune-t-999999999"]
    stale[0].clock = FakeClock()
    stale[0].remove()
    assert not (root / "cpuset" / "autotune-t-999999999").exists()


# --- the private Prometheus's targets ---------------------------------------------------------

def test_announced_targets_stay_next_to_the_current_ones(tmp_path: Path) -> None:
    prom = EmbeddedPrometheus(1.0, None, tmp_path / "logs")
    prom.announce({"lg": "http://127.0.0.1:2/metrics"}, {"g": "2"})  # before start: kept
    prom.workdir = tmp_path
    prom.set_targets({"lg": "http://127.0.0.1:1/metrics", "svc": "http://127.0.0.1:3/m"},
                     {"g": "1"})
    groups = json.loads(prom.targets_file.read_text())
    assert [(g["targets"], g["labels"]["g"]) for g in groups] == [
        (["127.0.0.1:1"], "1"), (["127.0.0.1:3"], "1"), (["127.0.0.1:2"], "2")]
    assert groups[1]["labels"]["__metrics_path__"] == "/m"
    # the announced generation becomes current: the same target, listed once
    prom.set_targets({"lg": "http://127.0.0.1:2/metrics"}, {"g": "2"})
    prom.announce({"lg": "http://127.0.0.1:4/metrics"}, {"g": "3"})
    groups = json.loads(prom.targets_file.read_text())
    assert [(g["targets"], g["labels"]["g"]) for g in groups] == [
        (["127.0.0.1:2"], "2"), (["127.0.0.1:4"], "3")]


# --- the Prometheus source's waits, on a FakeClock --------------------------------------------

class FakeScrapes:
    """Targets scraped every second at a fixed phase; answers the source's queries."""

    def __init__(self, clock: FakeClock, phase: float = 0.3, known_after: float = 0.0) -> None:
        self.clock, self.phase, self.known_after = clock, phase, known_after
        self.asked: list[tuple[str, float]] = []
        self.flaky = {"flaky": 1}

    def last_scrape(self, at: float) -> float:
        return math.floor(at - self.phase) + self.phase

    def __call__(self, query: str, at: float) -> Reading:
        self.asked.append((query, at))
        if query.startswith(("count(up", "count(max_over_time(up")):
            if self.clock.monotonic() < self.known_after:
                return Unavailable("no series")
            return 2.0
        if query.startswith("min(timestamp(up"):
            return self.last_scrape(self.clock.now())
        if query == "flaky" and self.flaky["flaky"]:
            self.flaky["flaky"] -= 1
            return Unavailable("Prometheus unreachable: ConnectionError")
        return 0.25


class FakeManager:
    scrape_interval = 1.0

    def __init__(self) -> None:
        self.targets: list[tuple[dict[str, str], dict[str, str]]] = []

    def start(self) -> str:
        return "http://127.0.0.1:9"

    def set_targets(self, endpoints: Mapping[str, str], labels: Mapping[str, str]) -> None:
        self.targets.append((dict(endpoints), dict(labels)))

    def stop(self) -> None:
        pass


def _source(clock: FakeClock, scrapes: FakeScrapes, warmup: float) -> PrometheusSource:
    source = PrometheusSource(Prometheus(), clock, embedded=FakeManager(), warmup=warmup)
    source._query = scrapes  # type: ignore[method-assign]
    source.client = lambda: None  # type: ignore[method-assign]
    return source


LIVE = Live(env={}, since=0, scope=(Matcher(GENERATION_LABEL, "7"),),
            endpoints={"a": "http://127.0.0.1:1/metrics", "b": "http://127.0.0.1:2/metrics"})


def test_observe_with_a_warmup_returns_once_the_targets_are_scraped_at_all() -> None:
    clock = FakeClock()
    scrapes = FakeScrapes(clock, known_after=0.4)
    _source(clock, scrapes, warmup=4).observe(LIVE)
    assert 0.4 <= clock.monotonic() <= 0.45
    assert scrapes.asked[-1][0] == 'count(up{autotune_generation="7"})'


def test_observe_without_a_warmup_waits_for_a_successful_scrape() -> None:
    clock = FakeClock()
    scrapes = FakeScrapes(clock)
    _source(clock, scrapes, warmup=1).observe(LIVE)
    assert scrapes.asked[-1][0] == 'count(up{autotune_generation="7"} == 1)'


def test_read_waits_for_a_scrape_after_the_window_then_checks_its_start() -> None:
    clock = FakeClock(start=1000.0)
    scrapes = FakeScrapes(clock, phase=0.3)
    source = _source(clock, scrapes, warmup=4)
    window = Window(990.0, 1000.0)  # scraped at 999.3; the next scrape lands at 1000.3
    out = source.read({"p99": "q1", "flaky": "flaky"}, window, LIVE)
    assert out == {"p99": 0.25, "flaky": 0.25}
    waited = 0.3 + RETRY_PAUSE
    assert clock.monotonic() == pytest.approx(waited, abs=source._poll + 1e-9)
    queries = [q for q, _ in scrapes.asked]
    assert 'count(max_over_time(up{autotune_generation="7"}[4s]) == 1)' in queries
    start_check = [at for q, at in scrapes.asked if q.startswith("count(max_over_time(up")]
    assert start_check == [990.0]
    assert all(at == 1000.0 for q, at in scrapes.asked if q in ("q1", "flaky"))


def test_read_reports_a_window_that_started_before_any_successful_scrape() -> None:
    clock = FakeClock(start=1000.0)
    scrapes = FakeScrapes(clock)
    source = _source(clock, scrapes, warmup=4)
    real = scrapes.__call__

    def nothing_up_at_start(query: str, at: float) -> Reading:
        return (Unavailable("no series") if query.startswith("count(max_over_time(up")
                else real(query, at))

    source._query = nothing_up_at_start  # type: ignore[method-assign]
    out = source.read({"p99": "q1"}, Window(999.0, 1000.0), LIVE)
    assert isinstance(out["p99"], Unavailable)
    assert "before the window started" in out["p99"].reason


# --- the service's ports per generation -------------------------------------------------------

EXPERIMENT = """
name: unit-local
target: {local: {workload: demo, cpus: 1.0, load: {rate: 100}}}
parameters: [{name: GOMAXPROCS, type: int, values: [1, 2]}]
chaos: {stress: {workers: 1, load: 30}}
measure: {warmup: 1s, window: 4s}
metrics: {p99: 'sum(up{ {{selector}} })'}
objective: {minimize: p99}
"""


def _service(tmp: Path, announced: list[tuple[dict[str, str], dict[str, str]]],
             port: int | None = None) -> LocalService:
    exp = parse_experiment(EXPERIMENT)
    if port is not None:
        assert exp.target.local is not None
        local = exp.target.local.model_copy(update={"port": port})
        exp = exp.model_copy(update={"target": exp.target.model_copy(update={"local": local})})
    limit = cgroups.CpuLimit(cgroups.Mode("affinity", reason="test"), 1.0, "unit")

    def announce(endpoints: Mapping[str, str], labels: Mapping[str, str]) -> None:
        announced.append((dict(endpoints), dict(labels)))

    return LocalService(exp, limit, proc.Registry(tmp / "p.json"), tmp, FakeClock(),
                        resolve=lambda name: tmp / name, announce=announce)


def test_the_next_generation_is_announced_on_fresh_ports(tmp_path: Path) -> None:
    announced: list[tuple[dict[str, str], dict[str, str]]] = []
    svc = _service(tmp_path, announced)
    endpoints, labels = announced[-1]
    assert labels == {GENERATION_LABEL: "1"} and set(endpoints) == {LOADGEN_JOB, SERVICE_JOB}
    svc._next_generation()
    assert svc.generation == 1
    assert svc._endpoints_for(svc.port, svc.load_port) == endpoints
    svc._plan_next()
    second, labels = announced[-1]
    assert labels == {GENERATION_LABEL: "2"}
    assert not set(second.values()) & set(endpoints.values())


def test_a_planned_port_taken_meanwhile_skips_its_generation(tmp_path: Path) -> None:
    announced: list[tuple[dict[str, str], dict[str, str]]] = []
    svc = _service(tmp_path, announced)
    planned = svc._planned
    assert planned is not None
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", planned[2]))
        stranger.listen()
        svc._next_generation()
    # generation 1 may label the stranger's series: never used for ours
    assert svc.generation == 2 and svc.load_port != planned[2]


def test_a_fixed_service_port_is_never_announced(tmp_path: Path) -> None:
    announced: list[tuple[dict[str, str], dict[str, str]]] = []
    _service(tmp_path, announced, port=18080)
    assert set(announced[-1][0]) == {LOADGEN_JOB}


def test_a_fixed_service_port_another_process_listens_on_is_refused(tmp_path: Path) -> None:
    # Review finding: with target.local.port set, nothing checked it was free. A process
    # already there answered the health check, so the trial measured it (and the load
    # generator sent it the configured headers).
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        svc = _service(tmp_path, [], port=port)
        with pytest.raises(TargetError, match=f"target.local.port {port}: another process"):
            svc.apply({"GOMAXPROCS": "1"})
    assert svc.service is None
