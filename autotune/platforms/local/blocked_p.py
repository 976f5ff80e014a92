"""Held Ps in the local demo service (``chaos.scenarios[].blocked_p``), through its loopback
endpoint ``/debug/chaos/blocked-p`` (``autotune/workloads/internal/blockedp``: goroutines that
read a timerfd through ``syscall.RawSyscall``, so the Go scheduler never hands their P on).

Under the Injector's contract (``autotune.chaos.base.Blocker``): ``block`` returns once the
holders exist and a hold was seen (the service's own counters), ends by itself after its
duration (the endpoint's ``for``); ``release`` returns once no holder is left, and raises
``StressNotRecovered`` (the study stops) when holders remain. An injection is tracked before
it is asked for, so one whose start failed half-way is still released. While every P is held
the service answers nothing, so each request may wait out a hold (its timeout allows for it).
Holders a dead run left end with their service process (the target's cleanup stops it) or at
their ``for``.

Requests carry ``X-Autotune-Chaos``: a browser may not send a custom header to another origin
without a CORS preflight, which the demo does not answer, so no web page can hold the Ps.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import requests

from autotune.chaos.base import Injection
from autotune.clock import Clock, wait_until
from autotune.errors import ChaosError, StressNotRecovered
from autotune.experiment.models import BlockedP
from autotune.live import Live

PATH = "/debug/chaos/blocked-p"
HEADER = {"X-Autotune-Chaos": "1"}
VERIFY_TIMEOUT = 10.0
POLL = 0.02


def _go(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


class _Gone(ChaosError):
    """The service does not answer at all: its process, and its holders, are gone."""


class DemoBlocker:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.active: dict[str, tuple[str, float]] = {}
        """Injection id -> the endpoint's URL and the requests' timeout."""

    def _call(self, method: str, url: str, timeout: float, **params: str) -> dict[str, Any]:
        try:
            r = requests.request(method, url, params=params or None, timeout=timeout,
                                 headers=HEADER)
        except requests.ConnectionError as e:
            raise _Gone(f"held Ps: {method} {url}: the service does not answer "
                        f"({type(e).__name__})") from e
        except requests.RequestException as e:
            raise ChaosError(f"held Ps: {method} {url}: {type(e).__name__}") from e
        if r.status_code != 200:
            raise ChaosError(f"held Ps: {method} {url} answered {r.status_code}: "
                             f"{r.text.strip()[:200]}")
        try:
            data = r.json()
        except ValueError:
            data = None
        # A command's own service (not the demo) answers its catch-all route: name that.
        if not isinstance(data, dict) or not {"goroutines", "held_seconds"} <= set(data):
            raise ChaosError(f"held Ps: {method} {url} did not answer as the demo service's "
                             f"endpoint (JSON with goroutines and held_seconds): "
                             f"{r.text.strip()[:200]!r}; blocked_p needs target.local's demo "
                             "workload")
        return data

    def block(self, live: Live, spec: BlockedP, duration: float,
              labels: Mapping[str, str]) -> Injection:
        base = live.placement.get("service_url")
        if not base:
            raise ChaosError("held Ps need the demo service's address; this target has none")
        url = f"{base}{PATH}"
        timeout = spec.hold + VERIFY_TIMEOUT
        inj_id = f"held-p-{labels.get('autotune/trial', 'x')}-{uuid.uuid4().hex[:6]}"
        before = float(self._call("GET", url, timeout)["held_seconds"])
        self.active[inj_id] = (url, timeout)  # before asking: a failed start is still undone
        try:
            self._call("POST", url, timeout, goroutines=str(spec.goroutines),
                       hold=_go(spec.hold), gap=_go(spec.gap), **{"for": _go(duration)})

            def held() -> dict[str, Any] | None:
                status = self._call("GET", url, timeout)
                if status["goroutines"] < spec.goroutines:
                    raise ChaosError(f"held Ps: {status['goroutines']} of {spec.goroutines} "
                                     "holders running right after the start")
                return status if float(status["held_seconds"]) > before else None

            status = wait_until(self.clock, held, VERIFY_TIMEOUT, POLL,
                                error=lambda _: ChaosError(
                                    f"held Ps: no hold completed {VERIFY_TIMEOUT:g}s after the "
                                    "start"))
        except BaseException:
            self.release(Injection(inj_id, self.clock.now()))
            raise
        return Injection(id=inj_id, started=self.clock.now(), details={
            "kind": "held Ps", "goroutines": spec.goroutines, "hold": spec.hold,
            "gap": spec.gap, "held_seconds_at_start": status["held_seconds"]})

    def release(self, injection: Injection) -> None:
        entry = self.active.get(injection.id)
        if entry is None:
            return  # released already
        url, timeout = entry
        try:
            left = self._call("DELETE", url, timeout)["goroutines"]
        except _Gone:
            left = 0  # the process is gone, and its holders with it
        if left:
            raise StressNotRecovered(f"held Ps: {left} holder(s) still running after DELETE "
                                     f"{url}", objects=[injection.id])
        del self.active[injection.id]

    def cleanup(self) -> list[str]:
        """Release what this run still holds; raise ``ChaosError`` naming what it could not."""
        done, failed = [], []
        for inj_id in list(self.active):
            try:
                self.release(Injection(inj_id, self.clock.now()))
                done.append(inj_id)
            except ChaosError as e:
                failed.append(f"{inj_id}: {e}")
        if failed:
            raise ChaosError("; ".join(failed))
        return done
