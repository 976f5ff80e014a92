"""Time, injected so waiting logic can be tested without sleeping.

Every wait for something to happen goes through ``wait_until(clock, predicate, ...)``, so that it
runs on the injected ``Clock``: real time in a run, a ``FakeClock`` (advanced only by ``sleep``)
in unit tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar, overload

T = TypeVar("T")


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock time, epoch seconds (what Prometheus queries use)."""

    def monotonic(self) -> float:
        """For measuring durations and deadlines."""

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """Advances only when something sleeps."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._mono = 0.0

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._now += seconds
            self._mono += seconds


@overload
def wait_until(
    clock: Clock,
    predicate: Callable[[], T | None],
    timeout: float,
    every: float,
    error: Callable[[T | None], BaseException],
) -> T: ...


@overload
def wait_until(
    clock: Clock,
    predicate: Callable[[], T],
    timeout: float,
    every: float,
    error: None = None,
) -> T: ...


def wait_until(
    clock: Clock,
    predicate: Callable[[], T | None],
    timeout: float,
    every: float,
    error: Callable[[T | None], BaseException] | None = None,
) -> T | None:
    """Call ``predicate`` until it returns a truthy value, and return that value.

    It is called at once, then every ``every`` seconds (``clock.sleep`` between calls, never
    past the deadline), and a last time when ``timeout`` seconds have passed on
    ``clock.monotonic()``. A predicate may raise to stop waiting early (e.g. "the process
    exited"); the exception propagates.

    On timeout: raises ``error(last)`` if ``error`` is given (``last`` is the predicate's last,
    falsy, result, for the message), else returns ``last``, so a caller that can live with a
    timeout tests the result's truthiness.
    """
    if every <= 0:
        raise ValueError(f"wait_until: every must be > 0, got {every}")
    deadline = clock.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            if error is not None:
                raise error(value)
            return value
        clock.sleep(min(every, remaining))
