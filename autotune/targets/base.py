"""The Target protocol: apply a candidate's environment, wait until it is live, put things back.

Contract (checked by tests/contract/test_target_contract.py for every implementation):

- ``apply(env)`` sets exactly the given variables (``None`` = unset) on the service, replacing the
  previous candidate, and returns only when the new configuration is serving (never a fixed sleep
  alone). Raises ``TargetError`` if it does not become live in time; the target is then left in a
  state ``restore()`` can undo.
- ``check(live)`` raises ``TargetError`` if the service restarted or changed since ``apply``
  (a measurement spanning a restart is not a measurement). It returns facts to record with the
  trial about changes that do not spoil the window (pods an autoscaler added, which the window's
  queries do not select); empty when nothing changed.
- ``restore(best)`` puts the target back as it was found and is idempotent; it runs in
  ``finally``. ``best`` is the study's best feasible candidate (or None); a target configured to
  keep the best (Kubernetes ``on_finish: best``) applies it instead, the others ignore it.
- ``cleanup()`` undoes what a dead run of this study left behind and says what it did.
- ``noise_probe()`` returns a probe of CPU used by other processes, or None where that cannot be
  measured (a cluster).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from autotune.insight.capture import Transport
from autotune.insight.schedtrace import Trace
from autotune.live import Live, Window

Env = Mapping[str, str | None]


class NoiseProbe(Protocol):
    def begin(self) -> None: ...

    def end(self) -> float:
        """CPU cores used on the host by processes that are not ours since ``begin``."""


class Target(Protocol):
    def describe(self) -> dict[str, Any]:
        """JSON-able facts about the target for reports (kind, CPU limit, Go version, ...)."""

    def apply(self, env: Env) -> Live: ...

    def check(self, live: Live) -> Mapping[str, Any]: ...

    def restore(self, best: Env | None = None) -> None: ...

    def cleanup(self) -> list[str]: ...

    def noise_probe(self) -> NoiseProbe | None: ...


@runtime_checkable
class SchedtraceReader(Protocol):
    """A target that runs the service with ``GODEBUG=schedtrace`` (``measure.schedtrace``) and
    can hand back the lines printed during a window, parsed; or the reason it cannot."""

    def schedtrace(self, live: Live, window: Window) -> Trace | str: ...


@runtime_checkable
class PprofSource(Protocol):
    """A target that can reach the live candidate's net/http/pprof (``measure.capture``): how
    to fetch from it, or the reason it cannot."""

    def pprof(self, live: Live) -> Transport | str: ...
