"""The Injector protocol: put CPU stress where a live candidate runs, verify it, take it away.

Contract (checked by tests/contract/test_injector_contract.py for every implementation):

- ``inject(...)`` returns only once the stress is verified to be running where the candidate
  runs; if it cannot verify that, it removes whatever it created and raises ``ChaosError``.
  ``duration`` is a dead-man switch: the stress ends by itself after it even if we die.
- ``recover(injection)`` removes the stress and returns only once it is verified gone; raises
  ``ChaosError`` (saying what to check) if that cannot be confirmed, or, once it is gone, if the
  stress did not last until now (removed or stopped by someone else: the window it was to
  stress is not valid). Idempotent.
- ``active()`` lists the injections of ours that are in place now (empty after recover).
- ``cleanup()`` removes every injection of ours left by a dead run and says what it removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from autotune.experiment.models import BlockedP, Stress
from autotune.live import Live


@dataclass(frozen=True)
class Injection:
    id: str
    started: float
    """Wall-clock time at which the stress was verified running."""
    details: Mapping[str, Any] = field(default_factory=dict)


class Injector(Protocol):
    def inject(
        self, live: Live, stress: Stress, duration: float, labels: Mapping[str, str]
    ) -> Injection: ...

    def recover(self, injection: Injection) -> None: ...

    def active(self) -> list[str]: ...

    def cleanup(self) -> list[str]: ...


class Blocker(Protocol):
    """Makes goroutines of the service hold their Ps (``chaos.scenarios[].blocked_p``), under the
    Injector's contract: ``block`` returns once the goroutines are verified holding their Ps
    (else undoes and raises ``ChaosError``) and ends by itself after ``duration``; ``release``
    returns once none is left (idempotent; ``StressNotRecovered`` when some remain);
    ``cleanup`` releases what this run still holds (holders live in the service's process:
    those of a dead run end with it, or at their ``duration``)."""

    def block(self, live: Live, spec: BlockedP, duration: float,
              labels: Mapping[str, str]) -> Injection: ...

    def release(self, injection: Injection) -> None: ...

    def cleanup(self) -> list[str]: ...
