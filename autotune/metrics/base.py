"""The MetricSource protocol.

Contract (checked by tests/contract/test_metric_source_contract.py for every implementation):

- ``observe(live)`` makes sure the source sees the live candidate (e.g. scrapes it) before the
  warm-up ends.
- ``read(queries, window, live)`` evaluates every rendered query for the window that ended at
  ``window.end`` and returns, per metric name, a float or an ``Unavailable`` with the reason.
  It never invents a value: an empty result, several series where one was expected, NaN or an
  error is ``Unavailable``. It only returns once data up to ``window.end`` has been collected.
- ``close()`` stops whatever the source started; idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from autotune.live import Live, Window


@dataclass(frozen=True)
class Unavailable:
    reason: str


Reading = float | Unavailable


class ScrapeManager(Protocol):
    """A Prometheus server that we run ourselves and point at each live candidate (local mode).

    ``start()`` returns its base URL once it answers; ``set_targets`` replaces the scrape targets
    (job name -> URL) and labels every series with ``labels``; ``stop()`` is idempotent.
    """

    scrape_interval: float

    def start(self) -> str: ...

    def set_targets(self, endpoints: Mapping[str, str], labels: Mapping[str, str]) -> None: ...

    def stop(self) -> None: ...


class MetricSource(Protocol):
    def observe(self, live: Live) -> None: ...

    def read(
        self, queries: Mapping[str, str], window: Window, live: Live
    ) -> dict[str, Reading]: ...

    def close(self) -> None: ...


@runtime_checkable
class RangeSource(Protocol):
    """A metric source that can also give a query's values over time (the report's heat maps).

    ``read_range`` evaluates ``query`` every ``step`` seconds from ``window.start + step`` to
    ``window.end`` and returns the series as Prometheus' ``query_range`` does (each with
    ``metric`` and ``values``), or ``Unavailable`` with the reason. ``scrape_interval``: seconds
    between samples, which bounds the step (an ``increase`` needs two samples).
    """

    @property
    def scrape_interval(self) -> float: ...

    def read_range(self, query: str, window: Window,
                   step: float) -> list[dict[str, Any]] | Unavailable: ...
