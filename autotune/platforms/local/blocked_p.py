"""Held Ps in the local demo service (``chaos.scenarios[].blocked_p``), through its loopback
endpoint ``/debug/chaos/blocked-p`` (``autotune/workloads/internal/blockedp``: goroutines that
read a timerfd through ``syscall.RawSyscall``, so the Go scheduler never hands their P on).

Under the Injector's contract (``autotune.chaos.base.Blocker``): ``block`` returns once the
holders exist and a hold was seen (the service's own counters), ends by itself after its
duration (the endpoint's ``for``); ``release`` returns once no holder is left. While every P is
held the service answers nothing, so each request waits up to the hold (``TIMEOUT``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import requests

from autotune.chaos.base import Injection
from autotune.clock import Clock, wait_until
from autotune.errors import ChaosError
from autotune.experiment.models import BlockedP
from autotune.live import Live

PATH = "/debug/chaos/blocked-p"
VERIFY_TIMEOUT = 10.0
POLL = 0.02


def _go(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


class DemoBlocker:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.active: dict[str, str] = {}  # injection id -> the endpoint's URL

    def _call(self, method: str, url: str, timeout: float, **params: str) -> dict[str, Any]:
        try:
            r = requests.request(method, url, params=params or None, timeout=timeout)
        except requests.RequestException as e:
            raise ChaosError(f"held Ps: {method} {url}: {type(e).__name__}") from e
        if r.status_code != 200:
            raise ChaosError(f"held Ps: {method} {url} answered {r.status_code}: "
                             f"{r.text.strip()[:200]}")
        data: dict[str, Any] = r.json()
        return data

    def block(self, live: Live, spec: BlockedP, duration: float,
              labels: Mapping[str, str]) -> Injection:
        base = live.placement.get("service_url")
        if not base:
            raise ChaosError("held Ps need the demo service's address; this target has none")
        url = f"{base}{PATH}"
        timeout = spec.hold + 5.0
        before = float(self._call("GET", url, timeout)["held_seconds"])
        self._call("POST", url, timeout, goroutines=str(spec.goroutines), hold=_go(spec.hold),
                   gap=_go(spec.gap), **{"for": _go(duration)})
        inj_id = f"held-p-{labels.get('autotune/trial', 'x')}-{len(self.active)}"
        self.active[inj_id] = url

        def held() -> dict[str, Any] | None:
            status = self._call("GET", url, timeout)
            if status["goroutines"] < spec.goroutines:
                raise ChaosError(f"held Ps: {status['goroutines']} of {spec.goroutines} "
                                 "holders running right after the start")
            return status if float(status["held_seconds"]) > before else None

        try:
            status = wait_until(self.clock, held, VERIFY_TIMEOUT, POLL, error=lambda _: ChaosError(
                f"held Ps: no hold completed {VERIFY_TIMEOUT:g}s after the start"))
        except BaseException:
            self.release(Injection(inj_id, self.clock.now()))
            raise
        return Injection(id=inj_id, started=self.clock.now(), details={
            "kind": "held Ps", "goroutines": spec.goroutines, "hold": spec.hold,
            "gap": spec.gap, "held_seconds_at_start": status["held_seconds"]})

    def release(self, injection: Injection) -> None:
        url = self.active.get(injection.id)
        if url is None:
            return  # released already
        left = self._call("DELETE", url, VERIFY_TIMEOUT)["goroutines"]
        if left:
            raise ChaosError(f"held Ps: {left} holder(s) still running after DELETE {url}")
        del self.active[injection.id]

    def cleanup(self) -> list[str]:
        done = []
        for inj_id in list(self.active):
            try:
                self.release(Injection(inj_id, self.clock.now()))
                done.append(inj_id)
            except ChaosError:
                # The service is gone (restored, restarted): its holders went with it.
                self.active.pop(inj_id, None)
        return done
