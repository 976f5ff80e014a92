"""What the three backend families pass between them: a live candidate and a time window.

Kept apart from targets/, chaos/ and metrics/ so that those packages never import each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Matcher:
    """One PromQL label matcher (``label="value"`` or ``label=~"regex"``)."""

    label: str
    value: str
    regex: bool = False


@dataclass(frozen=True)
class Live:
    """A candidate that is running and ready."""

    env: Mapping[str, str | None]
    since: float
    """Wall-clock time at which it became ready; measurement windows start after it."""
    scope: tuple[Matcher, ...]
    """PromQL label matchers selecting this service's series (fills ``{{selector}}``)."""
    placement: Mapping[str, Any] = field(default_factory=dict)
    """Where it runs, for the injector: a cgroup and PIDs, or a namespace, pod labels and pods."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """JSON-able facts recorded with the trial (PIDs, pods, GOMAXPROCS default, isolation)."""
    endpoints: Mapping[str, str] = field(default_factory=dict)
    """Scrape URLs by job name, for a metric source that scrapes by itself (local mode)."""
    pods: tuple[str, ...] = ()
    """Kubernetes pods of the candidate: an external Prometheus must have scraped each of them
    (``up == 1``) before a window starts."""
    load_scope: tuple[Matcher, ...] = ()
    """The load generator's series when they are not in ``scope`` (fills ``{{load_selector}}``;
    empty: the same as ``scope``, as locally where one label selects both)."""
    load_pods: tuple[str, ...] = ()
    """The load generator's pods, scraped (``up == 1``) before a window starts like ``pods``."""


@dataclass(frozen=True)
class Window:
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start
