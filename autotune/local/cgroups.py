"""A CPU limit like a Kubernetes container's: a cgroup with a CFS quota, or CPU affinity.

Layout: ``autotune-<study>-<pid>/`` (no limit) with ``service/`` (the quota; the service and the
stress run here, so the stress eats the service's own CPU limit, as chaos-daemon's does) and
``tools/`` (load generator and Prometheus, for CPU accounting only). cgroup v2 uses ``cpu.max``;
v1 uses ``cpu.cfs_quota_us`` and, where ``cpuacct`` is mounted separately, the same path there
for usage. Where no cgroup can be written, ``affinity`` pins the service and stress to
``ceil(cpus)`` CPUs instead, which limits parallelism but not time: every trial records that.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from autotune.errors import PrerequisiteError

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


@dataclass(frozen=True)
class Mode:
    kind: str  # "v2", "v1" or "affinity"
    cpu_root: Path | None = None
    acct_root: Path | None = None
    reason: str = ""


def _writable_dir(path: Path) -> bool:
    probe = path / f"autotune-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def detect(root: Path = ROOT) -> Mode:
    """Which isolation this machine allows us, and why not the better ones."""
    reasons = []
    controllers = root / "cgroup.controllers"
    if controllers.exists():
        if "cpu" in controllers.read_text().split() and _writable_dir(root):
            subtree = (root / "cgroup.subtree_control").read_text().split()
            if "cpu" in subtree or _enable_cpu_v2(root):
                return Mode("v2", root, root)
            reasons.append("cgroup v2: cannot enable the cpu controller for children")
        else:
            reasons.append("cgroup v2: cpu controller missing or not writable")
    cpu = root / "cpu"
    if (cpu / "cpu.cfs_quota_us").exists():
        if _writable_dir(cpu):
            acct = root / "cpuacct"
            acct_root = acct if (acct / "cpuacct.usage").exists() else None
            if (cpu / "cpuacct.usage").exists():
                acct_root = cpu
            return Mode("v1", cpu, acct_root)
        reasons.append("cgroup v1: /sys/fs/cgroup/cpu not writable (run as root)")
    else:
        reasons.append("no cgroup v1 cpu controller")
    return Mode("affinity", reason="; ".join(reasons))


def _enable_cpu_v2(root: Path) -> bool:
    try:
        (root / "cgroup.subtree_control").write_text("+cpu")
    except OSError:
        return False
    return True


@dataclass
class CpuLimit:
    """The cgroups (or CPU set) of one study run; ``remove()`` tears them down."""

    mode: Mode
    cpus: float
    name: str
    dirs: list[Path] = field(default_factory=list)
    cpu_set: set[int] = field(default_factory=set)

    @property
    def isolation(self) -> str:
        return "cgroup " + self.mode.kind if self.mode.kind != "affinity" else "affinity"

    def _paths(self, child: str) -> list[Path]:
        roots = {r for r in (self.mode.cpu_root, self.mode.acct_root) if r is not None}
        return [r / self.name / child for r in sorted(roots)]

    def procs_files(self, child: str) -> list[str]:
        """The ``cgroup.procs`` files a process must join to be in ``child`` (service/tools)."""
        if self.mode.kind == "affinity":
            return []
        return [str(p / "cgroup.procs") for p in self._paths(child)]

    def create(self) -> None:
        if self.mode.kind == "affinity":
            n = max(1, math.ceil(self.cpus))
            available = sorted(os.sched_getaffinity(0))
            self.cpu_set = set(available[-n:])
            return
        for child in ("service", "tools"):
            for path in self._paths(child):
                path.mkdir(parents=True, exist_ok=True)
                self.dirs.append(path)
        assert self.mode.cpu_root is not None
        service = self.mode.cpu_root / self.name / "service"
        quota = max(1000, round(self.cpus * PERIOD_US))
        if self.mode.kind == "v2":
            if "cpu" not in (self.mode.cpu_root / self.name / "cgroup.subtree_control").read_text():
                (self.mode.cpu_root / self.name / "cgroup.subtree_control").write_text("+cpu")
            (service / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (service / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (service / "cpu.cfs_quota_us").write_text(str(quota))

    def pids(self, child: str) -> list[int]:
        out: set[int] = set()
        for path in self._paths(child):
            with contextlib.suppress(OSError):
                out.update(int(x) for x in (path / "cgroup.procs").read_text().split())
        return sorted(out)

    @staticmethod
    def _procs(path: Path) -> str:
        try:
            return (path / "cgroup.procs").read_text().split().__repr__()
        except OSError:
            return "?"

    def usage_seconds(self) -> float | None:
        """CPU used by everything in our cgroups so far (exited processes included)."""
        if self.mode.kind == "affinity" or self.mode.acct_root is None:
            return None
        base = self.mode.acct_root / self.name
        if self.mode.kind == "v2":
            for line in (base / "cpu.stat").read_text().splitlines():
                key, value = line.split()
                if key == "usage_usec":
                    return int(value) / 1e6
            return None
        return int((base / "cpuacct.usage").read_text()) / 1e9

    def throttled_seconds(self) -> float | None:
        if self.mode.kind == "affinity" or self.mode.cpu_root is None:
            return None
        stat = (self.mode.cpu_root / self.name / "service" / "cpu.stat").read_text()
        for line in stat.splitlines():
            key, value = line.split()
            if key == "throttled_usec":
                return int(value) / 1e6
            if key == "throttled_time":
                return int(value) / 1e9
        return None

    def remove(self, timeout: float = 10.0) -> list[str]:
        """Kill what is still inside, then remove the directories (children first)."""
        if self.mode.kind == "affinity":
            return []
        leftovers = []
        for child in ("service", "tools"):
            for pid in self.pids(child):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
                leftovers.append(f"pid {pid} in {child}")
        deadline = time.monotonic() + timeout
        roots = {r for r in (self.mode.cpu_root, self.mode.acct_root) if r is not None}
        targets = [r / self.name / child for r in roots for child in ("service", "tools")]
        targets += [r / self.name for r in roots]
        for path in sorted(set(targets), key=lambda p: -len(p.parts)):
            while path.exists():
                try:
                    path.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        raise PrerequisiteError(f"cannot remove cgroup {path}: "
                                                f"still holds {self._procs(path)}") from None
                    time.sleep(0.05)
        self.dirs.clear()
        return leftovers


def stale(prefix: str, mode: Mode) -> list[CpuLimit]:
    """Cgroups named ``<prefix>-<pid>`` whose creating process is gone."""
    if mode.cpu_root is None:
        return []
    found = []
    for path in mode.cpu_root.glob(f"{prefix}-*"):
        pid = path.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            found.append(CpuLimit(mode=mode, cpus=1.0, name=path.name))
    return found
