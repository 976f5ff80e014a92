"""Every MetricSource: real numbers for real series, a reason (never a number) otherwise."""

from __future__ import annotations

import math

from autotune.live import Window
from autotune.metrics.base import Unavailable
from autotune.study.space import to_env
from tests.contract.harness import Harness


def test_reads_value_and_reports_unavailable_with_a_reason(harness: Harness) -> None:
    exp = harness.experiment
    settings = {p.name: (p.values[0] if p.values else p.low) for p in exp.parameters}
    live = harness.backends.target.apply(to_env(exp, settings))  # type: ignore[arg-type]
    source = harness.backends.source
    source.observe(live)
    start = harness.clock.now()
    harness.clock.sleep(exp.measure.window)
    window = Window(start, harness.clock.now())
    readings = source.read(
        {"value": harness.query("value"), "empty": harness.query("empty"),
         "invalid": harness.query("invalid")},
        window, live,
    )
    assert isinstance(readings["value"], float) and math.isfinite(readings["value"])
    for name in ("empty", "invalid"):
        assert isinstance(readings[name], Unavailable), readings[name]
        assert readings[name].reason


def test_close_is_idempotent_and_leaves_the_target_alone(harness: Harness) -> None:
    exp = harness.experiment
    settings = {p.name: (p.values[0] if p.values else p.low) for p in exp.parameters}
    live = harness.backends.target.apply(to_env(exp, settings))  # type: ignore[arg-type]
    source = harness.backends.source
    source.observe(live)  # the source is in use
    seen = harness.env_seen()
    source.close()
    source.close()
    # Closing the metric source is not stopping the trial: the service runs on as applied.
    assert harness.env_seen() == seen
    harness.backends.target.check(live)
