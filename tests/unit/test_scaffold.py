"""What `autotune init` writes (autotune/scaffold.py), from what it found: the histogram and Go
runtime series a service really exports, a Go-aware space for its CPU limit, and a file that
validates. The edges (starting the command, reading a Deployment) are tested with a real
outside service (tests/integration/test_init_outside.py) and the real control plane
(tests/kubernetes/test_init.py)."""

from __future__ import annotations

import pytest

from autotune import scaffold
from autotune.errors import PrerequisiteError
from autotune.experiment import parse_experiment
from autotune.study.design import go_default_gomaxprocs

RUNTIME = """\
# HELP go_sched_latencies_seconds Distribution of the time goroutines have spent runnable.
# TYPE go_sched_latencies_seconds histogram
go_sched_latencies_seconds_bucket{le="6.399999999999999e-08"} 0
go_sched_latencies_seconds_bucket{le="+Inf"} 12
go_sched_latencies_seconds_sum 0.001
go_sched_latencies_seconds_count 12
go_sched_pauses_total_gc_seconds_bucket{le="+Inf"} 4
go_gc_cycles_total_gc_cycles_total 4
go_sched_gomaxprocs_threads 2
process_cpu_seconds_total 0.05
go_gc_duration_seconds_bucket{le="+Inf"} 3
"""

SHOP_HISTOGRAM = """\
# TYPE shop_http_request_duration_seconds histogram
shop_http_request_duration_seconds_bucket{code="200",method="get",le="0.005"} 3
shop_http_request_duration_seconds_bucket{code="200",method="get",le="+Inf"} 3
shop_http_request_duration_seconds_count{code="200",method="get"} 3
shop_db_query_duration_seconds_bucket{le="+Inf"} 3
promhttp_metric_handler_requests_total{code="200"} 1
"""


def _local(exposition: str, **kwargs: object) -> scaffold.Service:
    defaults: dict[str, object] = {
        "name": "shop", "series": scaffold.exported_series(exposition), "cpu_limit": 1.0,
        "local_command": ("./shop", "-listen", "127.0.0.1:{port}"),
        "service_job": "autotune-service"}
    return scaffold.Service(**{**defaults, **kwargs})  # type: ignore[arg-type]


def test_the_services_request_histogram_is_the_objective_and_the_client_side_is_kept() -> None:
    exp = parse_experiment(scaffold.draft(_local(RUNTIME + SHOP_HISTOGRAM)))
    assert "shop_http_request_duration_seconds_bucket" in exp.metric("p99_latency").query
    assert "loadgen_request_duration_seconds_bucket" in exp.metric("client_p99").query
    assert exp.objective.minimize == "p99_latency"
    assert exp.constraints == ("error_rate <= 0.01",)


def test_without_a_request_histogram_the_load_generators_is_the_objective() -> None:
    text = scaffold.draft(_local(RUNTIME))
    exp = parse_experiment(text)
    assert "loadgen_request_duration_seconds_bucket" in exp.metric("p99_latency").query
    assert "client_p99" not in exp.metrics
    assert "no request histogram found" in text


def test_only_the_runtime_series_the_service_exports_become_metrics() -> None:
    text = scaffold.draft(_local(RUNTIME + SHOP_HISTOGRAM))
    exp = parse_experiment(text)
    assert {"gc_pause_p99", "sched_latency_p99", "gc_rate", "gomaxprocs",
            "service_cpu_cores"} <= set(exp.metrics)
    # No /cpu/classes series: the P-idle query would fail every trial; the file says how to
    # export it.
    assert "p_idle_fraction" not in exp.metrics
    assert "p_idle_fraction" in text and "WithGoCollectorRuntimeMetrics" in text
    assert 'job="autotune-service"' in exp.metric("service_cpu_cores").query


def test_a_service_without_runtime_metrics_gets_none_and_is_told() -> None:
    exp = parse_experiment(scaffold.draft(_local(SHOP_HISTOGRAM)))
    assert not {"gc_pause_p99", "sched_latency_p99", "p_idle_fraction"} & set(exp.metrics)


@pytest.mark.parametrize(("limit", "expected"), [
    (1.0, [1, 2]), (0.5, [1, 2]), (1.5, [1, 2, 4]), (3.0, [1, 2, 3, 4, 6]),
    (4.0, [1, 2, 4, 8]), (None, [1, 2, 4, 8]),
])
def test_gomaxprocs_runs_from_one_to_twice_the_limit_with_gos_default(
        limit: float | None, expected: list[int]) -> None:
    values = scaffold.gomaxprocs_values(limit)
    assert values == expected
    if limit is not None:
        assert go_default_gomaxprocs(limit) in values, "the baseline's setting is in the space"


def test_the_space_is_go_aware() -> None:
    exp = parse_experiment(scaffold.draft(_local(RUNTIME, cpu_limit=2.0,
                                                 forcegc_env="GC_EVERY_MS")))
    space = {p.name: p for p in exp.parameters}
    assert space["GOMAXPROCS"].values == (1, 2, 4)
    assert space["GOGC"].values is not None and {100, 400} <= set(space["GOGC"].values)
    forced = space["forcegc_interval_ms"]
    assert forced.env_var == "GC_EVERY_MS" and forced.values is not None and 0 in forced.values
    assert exp.baseline.params == {"GOMAXPROCS": None, "GOGC": None, "forcegc_interval_ms": None}
    # Stress of half the CPU limit, inside the service's own cgroup.
    assert exp.chaos.stress.workers * exp.chaos.stress.load / 100 == pytest.approx(1.0)


def test_no_forced_gc_parameter_without_the_services_knob() -> None:
    exp = parse_experiment(scaffold.draft(_local(RUNTIME)))
    assert [p.name for p in exp.parameters] == ["GOMAXPROCS", "GOGC"]


def test_a_deployment_whose_metrics_were_read_needs_a_request_histogram() -> None:
    service = scaffold.Service(name="api", series=scaffold.exported_series(RUNTIME),
                               cpu_limit=1.0, deployment=("shop", "api", "api"),
                               prometheus_url="http://prometheus.monitoring:9090")
    with pytest.raises(PrerequisiteError, match="no request-latency histogram"):
        scaffold.draft(service)


def test_a_deployment_whose_metrics_were_not_read_assumes_client_golangs_names() -> None:
    text = scaffold.draft(scaffold.Service(
        name="api", series=None, cpu_limit=None, deployment=("shop", "api", "api"),
        prometheus_url="http://prometheus.monitoring:9090"))
    exp = parse_experiment(text)
    assert "http_request_duration_seconds_bucket" in exp.metric("p99_latency").query
    assert exp.measure.load is not None and exp.measure.load.metric == "request_rate"
    assert "validate --live" in text
    assert exp.measure.window >= 4 * 30, "at least 4 scrapes at the common 30 s interval"


def test_histograms_that_are_not_the_services_requests_are_not_picked() -> None:
    series = scaffold.exported_series(
        "go_gc_duration_seconds_bucket 1\nloadgen_request_duration_seconds_bucket 1\n"
        "promhttp_request_duration_seconds_bucket 1\nhttp_request_duration_seconds_bucket 1\n")
    assert scaffold.latency_histogram(series) == "http_request_duration_seconds"
    assert scaffold.latency_histogram(scaffold.exported_series(RUNTIME)) is None


@pytest.mark.parametrize(("text", "name"), [
    ("My_Service", "my_service"), ("./bin/server", "bin-server"), ("Ünïcode!", "n-code"),
    ("---", "service"),
])
def test_names_are_made_valid(text: str, name: str) -> None:
    assert scaffold.experiment_name(text) == name
