"""The scrape interval inferred from a range query of ``timestamp(up{...})`` (what a query front
end answers when it serves neither ``/api/v1/targets`` nor ``/api/v1/status/config``)."""

from __future__ import annotations

from typing import Any

from autotune.metrics.prometheus import spacing


def _series(*stamps: float, step: float = 1.0) -> dict[str, Any]:
    """A range query's series: at each step, the newest sample's timestamp."""
    values, i = [], 0
    at = stamps[0]
    while at <= stamps[-1]:
        while i + 1 < len(stamps) and stamps[i + 1] <= at:
            i += 1
        values.append([at, f"{stamps[i]:.3f}"])
        at += step
    return {"metric": {"pod": "a"}, "values": values}


def test_the_median_gap_between_distinct_samples() -> None:
    every_15s = [1000.0 + 15 * k for k in range(8)]
    assert spacing([_series(*every_15s)]) == (15.0, 1)
    # one missed scrape (a 30 s gap) does not double it
    assert spacing([_series(*every_15s[:3], *every_15s[4:])]) == (15.0, 1)


def test_millisecond_jitter_is_not_an_interval() -> None:
    # A tick that fired late: 4 x 15.002 s would reject a 60 s window.
    assert spacing([_series(0.0, 15.002, 30.004, 45.001)]) == (15.0, 1)
    assert spacing([_series(0.0, 15.5, 31.0, 46.5)]) == (15.5, 1)


def test_the_slowest_series_and_short_intervals() -> None:
    fast = _series(*[100.0 + 15 * k for k in range(5)])
    slow = _series(*[100.0 + 30 * k for k in range(3)])
    assert spacing([fast, slow]) == (30.0, 2)
    assert spacing([_series(*[10 + 0.2 * k for k in range(20)], step=0.05)]) == (0.2, 1)


def test_no_series_with_two_samples_says_nothing() -> None:
    assert spacing([]) is None
    assert spacing([_series(100.0)]) is None
    assert spacing([{"metric": {}, "values": [[1, "NaN?"]]}]) is None
