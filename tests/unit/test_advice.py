"""validate's warnings: a constraint inside one of client_golang's buckets, a GOMAXPROCS range
far from the CPU limit; and the bucket table itself, re-derived from the real Go runtime."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

from autotune.advice import advise, gomaxprocs_warnings
from autotune.experiment import parse_experiment
from autotune.metrics.buckets import CLIENT_GOLANG_SECONDS_LE, bucket_around, rebucket
from autotune.platforms.local.gobuild import find_go, go_env

CLUSTER = """
name: advice
target: {kubernetes: {namespace: shop, deployment: api, container: api}}
prometheus: {url: "http://prometheus:9090"}
parameters:
  - {name: GOMAXPROCS, type: int, values: %s}
chaos: {stress: {workers: 2, load: 50}}
measure: {window: 60s, load: {metric: rate}}
metrics:
  rate: 'sum(rate(http_requests_total{ {{selector}} }[{{window}}]))'
  p99: >-
    histogram_quantile(0.99, sum by (le)
    (rate(http_request_duration_seconds_bucket{ {{selector}} }[{{window}}])))
  gc_pause_p99: >-
    histogram_quantile(0.99, sum by (le)
    (rate(go_sched_pauses_total_gc_seconds_bucket{ {{selector}} }[{{window}}])))
objective: {minimize: p99}
constraints: [%s]
"""


def _exp(values: str = "[1, 2, 4]", constraint: str = "'gc_pause_p99 <= 0.005'",
         text: str = CLUSTER) -> object:
    return parse_experiment(text % (values, constraint))


def test_a_constraint_inside_one_bucket_is_named_with_the_bucket() -> None:
    [warning] = advise(_exp())  # type: ignore[arg-type]
    assert warning.startswith("constraints[0]: 'gc_pause_p99 <= 0.005' falls inside one bucket "
                              "(0.918 ms, 10.5 ms] of go_sched_pauses_total_gc_seconds_bucket")


@pytest.mark.parametrize("constraint", ["'gc_pause_p99 <= 0.0105'", "'gc_pause_p99 <= 0.000918'",
                                        "'p99 <= 0.005'"])
def test_a_bucket_bound_or_a_fine_histogram_is_fine(constraint: str) -> None:
    assert advise(_exp(constraint=constraint)) == []  # type: ignore[arg-type]


def test_local_targets_export_fine_buckets_so_no_bucket_warning() -> None:
    text = (CLUSTER.replace("target: {kubernetes: {namespace: shop, deployment: api, "
                            "container: api}}", "target: {simulated: {optimum: {GOMAXPROCS: 2}}}")
            .replace(", load: {metric: rate}", ""))
    assert advise(_exp(text=text)) == []  # type: ignore[arg-type]


@pytest.mark.parametrize(("target", "warned"), [
    ("{local: {command: ['./svc', '-addr', '127.0.0.1:{port}'], cpus: 1}}", True),
    ("{local: {workload: demo, cpus: 1}}", False),
])
def test_a_local_command_exports_client_golangs_buckets_the_demo_its_own(
        target: str, warned: bool) -> None:
    # Review finding (a first-time user): the warning never fired for a local command, a
    # service of the user's own exporting client_golang's coarse buckets.
    text = (CLUSTER.replace("target: {kubernetes: {namespace: shop, deployment: api, "
                            "container: api}}", f"target: {target}")
            .replace('prometheus: {url: "http://prometheus:9090"}\n', "")
            .replace(", load: {metric: rate}", ""))
    found = [w for w in advise(_exp(text=text)) if "falls inside one bucket" in w]  # type: ignore[arg-type]
    assert bool(found) == warned, found


def test_gomaxprocs_range_far_from_the_limit() -> None:
    exp = _exp("[16, 32]")
    [excludes, far] = gomaxprocs_warnings(exp, 1.0)  # type: ignore[arg-type]
    assert excludes.startswith("parameters[0] (GOMAXPROCS): the range 16..32 does not include "
                               "Go's own default for this limit (2)")
    assert far.startswith("parameters[0] (GOMAXPROCS): values above 8 are more than 8x the "
                          "1-CPU limit")
    assert "Go >= 1.25 uses the 1-CPU limit: GOMAXPROCS=2" in far
    assert gomaxprocs_warnings(exp, 16.0) == []  # type: ignore[arg-type]
    assert gomaxprocs_warnings(_exp("[1, 2, 4, 8]"), 1.0) == []  # type: ignore[arg-type]
    assert gomaxprocs_warnings(exp, None) == []  # type: ignore[arg-type]


def test_a_query_without_the_candidates_selector_or_with_a_fixed_range_is_named() -> None:
    """Review finding: such queries validated silently, and every trial then read much the
    same number (other pods' series, earlier candidates' still in range)."""
    assert not [w for w in advise(_exp(constraint="")) if w.startswith("metrics.")]
    loose = CLUSTER.replace("rate(http_requests_total{ {{selector}} }[{{window}}])",
                            "rate(http_requests_total[5m])")
    warnings = [w for w in advise(_exp(constraint="", text=loose)) if w.startswith("metrics.")]
    assert len(warnings) == 2 and all(w.startswith("metrics.rate: ") for w in warnings)
    assert "has no {{selector}}" in warnings[0] and "the range [5m...] is fixed" in warnings[1]
    # every shipped experiment selects its candidate over its window
    root = Path(__file__).parents[2] / "experiments"
    for path in root.glob("*.yaml"):
        text = path.read_text()
        if "parameters:" in text:
            assert not [w for w in advise(parse_experiment(text)) if w.startswith("metrics.")]


def test_bucket_around() -> None:
    assert bucket_around(0.005) == (0.000917504, 0.01048576)
    assert bucket_around(0.5) == (0.117440512, math.inf)
    assert bucket_around(0.01048576) is None and bucket_around(0.0105) is None


PROGRAM = """package main

import (
\t"fmt"
\t"runtime/metrics"
)

func main() {
\tfor _, name := range []string{"/sched/latencies:seconds", "/sched/pauses/total/gc:seconds"} {
\t\ts := []metrics.Sample{{Name: name}}
\t\tmetrics.Read(s)
\t\tfor _, b := range s[0].Value.Float64Histogram().Buckets {
\t\t\tfmt.Printf("%v ", b)
\t\t}
\t\tfmt.Println()
\t}
}
"""


@pytest.mark.integration
def test_the_table_is_what_client_golang_makes_of_the_runtime_buckets(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module buckets\n\ngo 1.21\n")
    (tmp_path / "main.go").write_text(PROGRAM)
    out = subprocess.run([find_go(), "run", "."], cwd=tmp_path, env=go_env(), text=True,
                         capture_output=True, timeout=300, check=True).stdout
    for line in out.strip().splitlines():
        boundaries = [float(x.replace("Inf", "inf")) for x in line.split()]
        # runtime buckets are lower-bound inclusive; Prometheus' le is each bucket's upper bound
        assert tuple(rebucket(boundaries)[2:]) == CLIENT_GOLANG_SECONDS_LE[1:]
