"""The local target's noise probe: the CPU the host spent during a window on processes that are
not ours (other tenants of the machine): /proc/stat's busy time minus our cgroups' (or our
processes') usage and autotune's own."""

from __future__ import annotations

import os
import time
from pathlib import Path

from autotune import pids
from autotune.platforms.local import proc
from autotune.platforms.local.cgroups import CpuLimit


def _host_busy_seconds() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class HostNoise:
    """CPU used on the host by processes that are not ours, in cores, over begin..end."""

    def __init__(self, limit: CpuLimit, registry: proc.Registry) -> None:
        self.limit, self.registry = limit, registry
        self._start: tuple[float, float, float] | None = None

    def _ours(self) -> float:
        usage = self.limit.usage_seconds()
        if usage is None:  # affinity: no cgroup accounting; count our live processes
            members = [m for e in self.registry.entries() for m in proc.group_members(e.pid)]
            usage = sum(pids.cpu_seconds(m) for m in members)
        return usage + pids.cpu_seconds(os.getpid())

    def begin(self) -> None:
        # Real time, not the injected clock: it divides real CPU seconds.
        self._start = (time.monotonic(), _host_busy_seconds(), self._ours())

    def end(self) -> float:
        assert self._start is not None, "begin() first"
        t0, busy0, ours0 = self._start
        elapsed = max(1e-3, time.monotonic() - t0)
        foreign = (_host_busy_seconds() - busy0) - (self._ours() - ours0)
        return max(0.0, foreign / elapsed)
