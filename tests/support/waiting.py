"""Waiting in tests on a condition, never for a fixed time: ``until`` polls (real time) and fails
the test with what it waited for; ``targets_scraped`` is the wait on Prometheus's scrape of a
generation's announced targets."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from autotune.clock import SystemClock, wait_until
from autotune.metrics.prometheus import PrometheusSource

T = TypeVar("T")


def until(what: str, condition: Callable[[], T | None], timeout: float,
          every: float = 0.05) -> T:
    """Poll ``condition`` until it is truthy and return its value; fail with ``what`` after
    ``timeout`` seconds."""
    def error(last: object) -> AssertionError:
        return AssertionError(f"{what}: not within {timeout:g}s (last: {last!r})")

    return wait_until(SystemClock(), condition, timeout=timeout, every=every, error=error)


def targets_scraped(source: PrometheusSource, generation: int | str, count: int = 2, *,
                    up: bool = False, timeout: float = 30.0) -> None:
    """Wait until Prometheus has ``count`` targets of ``generation`` (announced and scraped at
    least once, or with ``up`` whose last scrape succeeded)."""
    selector = f'up{{autotune_generation="{generation}"}}'
    query = f"count({selector} == 1)" if up else f"count({selector})"
    state = "up" if up else "announced and scraped"
    until(f"the {count} targets of generation {generation} {state}",
          lambda: source._query(query, time.time()) == float(count), timeout, every=0.2)
