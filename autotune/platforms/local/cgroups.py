"""A CPU limit like a Kubernetes container's: a cgroup with a CFS quota, its own CPUs, or affinity.

Layout: ``autotune-<study>-<pid>/`` (no limit) with ``service/`` (the quota; the service and the
stress run here, so the stress eats the service's own CPU limit, as chaos-daemon's does) and
``tools/`` (load generator and Prometheus, for CPU accounting only). cgroup v2 uses ``cpu.max``;
v1 uses ``cpu.cfs_quota_us`` and, where ``cpuacct`` is mounted separately, the same path there
for usage.

Isolation, best first:

- ``cpuset``: the quota, and the cpuset controller keeps the tools (load generator, Prometheus
  and, on cgroup v1 where cpuset is a separate hierarchy, autotune itself, which moves back before
  removing the group) on one CPU of their own (the lowest-numbered) and gives ``service/`` all
  the others. v1 needs ``cpuset.cpus`` and ``cpuset.mems`` written, parent first, before any task
  joins. The service keeps more CPUs than its quota where the host has them, as a pod on a node
  has: its quota then still throttles parallel bursts, and Go's default GOMAXPROCS is still
  ``max(2, ceil(cpus))``. With only ``ceil(cpus)`` CPUs left for it (a 2-CPU host and
  ``cpus: 1``), neither holds: the quota can never bind, Go defaults to ``ceil(cpus)`` Ps, and
  stress competes with the service for the same core by time-slicing, which changes the response
  surface (measured on 2 CPUs, stress 2x25 %, 300 rps, p99: GOMAXPROCS=1 6 ms with the quota
  alone, 21 ms in a 1-CPU cpuset; the default 13 ms vs 21 ms). ``auto`` therefore takes a cpuset
  only where the service keeps at least ``ceil(cpus) + 1`` CPUs; ``cpuset`` asked for explicitly
  also takes the tight one, and says so in ``note``.
- ``cgroup``: the quota only; every process may run on every CPU.
- ``affinity``: where no cgroup can be written, the service and stress are pinned to
  ``ceil(cpus)`` CPUs, which limits parallelism but not time.

Every trial records which one it got, and why not a better one (``note``).

Looking changes nothing: ``detect()`` (run by ``autotune cleanup`` and ``doctor`` too) only
reads. On cgroup v2 a root that does not yet enable ``cpu`` (or ``cpuset``) for its children
has it enabled by ``create()``, for the run, and disabled again by ``remove()`` unless another
autotune group still exists (or the kernel refuses: someone uses it now); then it is handed to
the other groups' owner records, and the last of them to go disables it. A run killed before
its ``remove()`` recorded what it enabled in its group's owner record (below): the cleanup that
removes its group disables them in its place.

Whose group is it: ``stale()`` takes exactly ``<prefix>-<digits>`` (cleaning experiment ``api``
never touches ``autotune-api-canary-<pid>``). Its owner is recorded on the group directory
(the extended attribute ``user.autotune.owner``, ``autotune.platforms.local.ownership``'s
record, which says when its maker counts as dead; a PID alone means nothing across PID
namespaces). A group without the record (an older autotune, a kernel without extended
attributes on cgroupfs) is judged by the PID in its name, as before.

Its size (~530 lines) is three hierarchies (v1, v2, cpuset); the next cut is the v1 and v2
hierarchies' files into a module each.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import runlock
from autotune.clock import Clock, SystemClock, wait_until
from autotune.errors import PrerequisiteError
from autotune.platforms.local import ownership

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
CHILDREN = ("service", "tools")
OWNER_XATTR = "user.autotune.owner"


@dataclass(frozen=True)
class Mode:
    kind: str  # "v2", "v1" or "affinity"
    cpu_root: Path | None = None
    acct_root: Path | None = None
    reason: str = ""
    cpuset_root: Path | None = None
    """Where a cpuset can be made (v1: the cpuset hierarchy; v2: the same root); None if not."""
    cpuset_reason: str = ""
    """Why no cpuset can be made, when ``cpuset_root`` is None."""


def _writable_dir(path: Path) -> bool:
    # Not "autotune-<...>": no experiment's stale() pattern may ever match a probe.
    probe = path / f"autotune.probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def detect(root: Path = ROOT) -> Mode:
    """Which isolation this machine allows us, and why not the better ones. Changes nothing
    (but for a directory made and removed at once, to see that it can be)."""
    reasons = []
    controllers = root / "cgroup.controllers"
    if controllers.exists():
        available = controllers.read_text().split()
        if "cpu" in available and _writable_dir(root):
            subtree = (root / "cgroup.subtree_control").read_text().split()
            busy = _holds_processes(root)
            # A root that does not enable a controller for its children yet can, for the run,
            # unless it holds processes (create() enables what it lacks then).
            if "cpu" in subtree or not busy:
                if "cpuset" not in available:
                    return Mode("v2", root, root, cpuset_reason="cgroup v2: no cpuset controller")
                if "cpuset" in subtree or not busy:
                    return Mode("v2", root, root, cpuset_root=root)
                return Mode("v2", root, root,
                            cpuset_reason=f"cgroup v2: cannot enable the cpuset controller: "
                                          f"{busy}")
            reasons.append(f"cgroup v2: cannot enable the cpu controller for children: {busy}")
        else:
            reasons.append("cgroup v2: cpu controller missing or not writable")
    cpu = root / "cpu"
    if (cpu / "cpu.cfs_quota_us").exists():
        if _writable_dir(cpu):
            acct = root / "cpuacct"
            acct_root = acct if (acct / "cpuacct.usage").exists() else None
            if (cpu / "cpuacct.usage").exists():
                acct_root = cpu
            cpuset = root / "cpuset"
            if not (cpuset / "cpuset.cpus").exists():
                return Mode("v1", cpu, acct_root, cpuset_reason="cgroup v1: no cpuset hierarchy")
            if not _writable_dir(cpuset):
                return Mode("v1", cpu, acct_root,
                            cpuset_reason="cgroup v1: /sys/fs/cgroup/cpuset not writable")
            return Mode("v1", cpu, acct_root, cpuset_root=cpuset)
        reasons.append("cgroup v1: /sys/fs/cgroup/cpu not writable (run as root)")
    else:
        reasons.append("no cgroup v1 cpu controller")
    return Mode("affinity", reason="; ".join(reasons))


def _holds_processes(root: Path) -> str:
    """Why ``root`` cannot enable controllers for its children ("" if it can): cgroup v2 lets
    only a group without processes of its own do that, the hierarchy's root excepted (the root
    has no ``cgroup.type``; the root of a container's cgroup namespace has one)."""
    if not (root / "cgroup.type").exists():
        return ""
    try:
        if not (root / "cgroup.procs").read_text().split():
            return ""
    except OSError as e:
        return f"{root}/cgroup.procs: {e.strerror or e}"
    return (f"{root} holds processes (cgroup v2 enables controllers only in a group without "
            "any: move them into a child group, as systemd and container runtimes do)")


def _owner_record(lock: runlock.RunLock | None, enabled: list[str]) -> bytes:
    # What this run enabled in the root's subtree_control: a run killed before its remove()
    # leaves them for the next cleanup (``stale``) to disable.
    return json.dumps(ownership.record(lock, enabled=list(enabled))).encode()


def _read_owner(path: Path) -> dict[str, Any] | None:
    try:
        raw = json.loads(os.getxattr(path, OWNER_XATTR))
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def _add_enabled(path: Path, enabled: list[str]) -> bool:
    """Add ``enabled`` to the group's owner record; False where it has none (an older
    autotune, no extended attributes): then the controllers stay enabled, as before."""
    record = _read_owner(path)
    if record is None:
        return False
    held = record.get("enabled")
    record["enabled"] = sorted({*(held if isinstance(held, list) else []), *enabled})
    try:
        os.setxattr(path, OWNER_XATTR, json.dumps(record).encode())
    except OSError:
        return False
    return True


def parse_cpu_list(text: str) -> list[int]:
    """``"0-2,4"`` -> ``[0, 1, 2, 4]`` (the kernel's cpuset list format)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return sorted(out)


def format_cpu_list(cpus: list[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


TIGHT_NOTE = ("cpuset leaves the service only {n} CPU(s), no more than its quota: the quota "
              "cannot throttle it, Go's default GOMAXPROCS is {n} (in a pod on a bigger node: "
              "max(2, ceil(cpus))), and stress time-slices with it on the same core(s)")


def split_cpus(available: list[int], cpus: float,
               tight: bool = False) -> tuple[list[int], list[int]] | str:
    """(service CPUs, tools CPUs): the lowest-numbered CPU for the tools, the rest for the
    service, which must keep at least ``ceil(cpus) + 1`` (``ceil(cpus)`` if ``tight``) of them.
    A string says why not."""
    n = max(1, math.ceil(cpus))
    need = n + 1 if tight else n + 2
    if len(available) < need:
        why = ("" if tight else
               f" (ceil({cpus:g}) + 1 for the service, so its quota still binds as in a pod, "
               "+ 1 for the load generator; isolation: cpuset accepts one CPU less)")
        return f"cpuset: {len(available)} CPU(s) available, need {need}{why}"
    ordered = sorted(available)
    return ordered[1:], ordered[:1]


def _available_cpus(mode: Mode) -> list[int]:
    assert mode.cpuset_root is not None
    name = "cpuset.effective_cpus" if mode.kind == "v1" else "cpuset.cpus.effective"
    try:
        allowed = parse_cpu_list((mode.cpuset_root / name).read_text())
    except OSError:
        allowed = sorted(os.sched_getaffinity(0))
    return sorted(set(allowed) & os.sched_getaffinity(0))


def _own_cpuset(mode: Mode) -> str | None:
    """The cpuset cgroup this process is in (v1), relative to the hierarchy's root."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if mode.kind == "v1" and "cpuset" in controllers.split(","):
            return path
    return None


@dataclass
class CpuLimit:
    """The cgroups (or CPU set) of one study run; ``remove()`` tears them down.

    ``want_cpuset``: give the service its own CPUs when the host allows it; otherwise ``note``
    says why not and the limit is the quota alone.
    """

    mode: Mode
    cpus: float
    name: str
    want_cpuset: bool = False
    tight_cpuset: bool = False
    """Accept a cpuset that leaves the service no more CPUs than its quota (see TIGHT_NOTE)."""
    join_tools: bool = True
    """With a v1 cpuset, move this process (autotune) into ``tools/`` while the limit exists."""
    clock: Clock = field(default_factory=SystemClock)
    lock: runlock.RunLock | None = None
    """The run lock of the run this limit belongs to: recorded as the groups' owner (see
    ``stale``), and held as long as the limit exists."""
    enabled: list[str] = field(default_factory=list)
    """cgroup v2 controllers this limit enabled in the root (``remove()`` disables them)."""
    dirs: list[Path] = field(default_factory=list)
    cpu_set: set[int] = field(default_factory=set)
    service_cpus: list[int] = field(default_factory=list)
    tools_cpus: list[int] = field(default_factory=list)
    note: str = ""
    joined_from: str | None = None

    def __post_init__(self) -> None:
        if self.mode.kind == "affinity":
            self.note = self.mode.reason
            return
        if not self.want_cpuset:
            return
        if self.mode.cpuset_root is None:
            self.note = self.mode.cpuset_reason
            return
        plan = split_cpus(_available_cpus(self.mode), self.cpus, self.tight_cpuset)
        if isinstance(plan, str):
            self.note = plan
            return
        self.service_cpus, self.tools_cpus = plan
        if len(self.service_cpus) <= self.cpus:
            self.note = TIGHT_NOTE.format(n=len(self.service_cpus))

    @property
    def isolation(self) -> str:
        """``cpuset``, ``cgroup`` or ``affinity`` (see the module docstring)."""
        if self.mode.kind == "affinity":
            return "affinity"
        return "cpuset" if self.service_cpus else "cgroup"

    def facts(self) -> dict[str, object]:
        """JSON-able: what isolation the service has, on which CPUs, and why not better."""
        out: dict[str, object] = {"isolation": self.isolation}
        if self.mode.kind != "affinity":
            out["cgroup_version"] = self.mode.kind
        if self.service_cpus:
            out.update(service_cpus=self.service_cpus, tools_cpus=self.tools_cpus,
                       autotune_in_tools=self.join_tools and self.mode.kind == "v1")
        if self.cpu_set:
            out["service_cpus"] = sorted(self.cpu_set)
        if self.note:
            out["isolation_note"] = self.note
        return out

    def _roots(self) -> list[Path]:
        roots = {r for r in (self.mode.cpu_root, self.mode.acct_root) if r is not None}
        if self.service_cpus and self.mode.cpuset_root is not None:
            roots.add(self.mode.cpuset_root)
        return sorted(roots)

    def _all_roots(self) -> list[Path]:
        """Every hierarchy a limit of this name may have directories in (for removal)."""
        roots = {r for r in (self.mode.cpu_root, self.mode.acct_root, self.mode.cpuset_root)
                 if r is not None}
        return sorted(roots)

    def _paths(self, child: str) -> list[Path]:
        return [r / self.name / child for r in self._roots()]

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
        if self.mode.kind == "v2":
            self._enable_root()
        roots = self._roots()
        owner = _owner_record(self.lock, self.enabled)
        for root in roots:
            for path in (root / self.name, *(root / self.name / c for c in CHILDREN)):
                path.mkdir(parents=True, exist_ok=True)
                if path not in self.dirs:
                    self.dirs.append(path)
                if path == root / self.name:
                    with contextlib.suppress(OSError):  # no xattrs here: judged by the name
                        os.setxattr(path, OWNER_XATTR, owner)
        assert self.mode.cpu_root is not None
        base = self.mode.cpu_root / self.name
        quota = max(1000, round(self.cpus * PERIOD_US))
        if self.mode.kind == "v2":
            controllers = "+cpu +cpuset" if self.service_cpus else "+cpu"
            if any(c[1:] not in (base / "cgroup.subtree_control").read_text().split()
                   for c in controllers.split()):
                (base / "cgroup.subtree_control").write_text(controllers)
            (base / "service" / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (base / "service" / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (base / "service" / "cpu.cfs_quota_us").write_text(str(quota))
        if self.service_cpus:
            self._write_cpusets()
            if self.join_tools and self.mode.kind == "v1":
                self._join_tools()

    def _enable_root(self) -> None:
        """Enable in the root, for the run, the controllers it does not enable now.

        Read now, not as ``detect()`` found them: the run's own start-up cleanup may have
        disabled them since (a killed run had enabled them, its group's removal undoes that)."""
        assert self.mode.cpu_root is not None
        control = self.mode.cpu_root / "cgroup.subtree_control"
        wanted = ["cpu", "cpuset"] if self.service_cpus else ["cpu"]
        for controller in wanted:
            if controller in control.read_text().split() or controller in self.enabled:
                continue
            try:
                control.write_text(f"+{controller}")
            except OSError as e:
                raise PrerequisiteError(
                    f"cannot enable the {controller} controller in {control}: "
                    f"{e.strerror or e} (target.local.isolation: affinity needs no cgroup)"
                ) from None
            self.enabled.append(controller)

    def _disable_root(self) -> None:
        """Undo ``_enable_root`` unless another autotune group may use the controllers."""
        if not self.enabled or self.mode.cpu_root is None:
            return
        root = self.mode.cpu_root
        others = [p for p in root.glob("autotune-*") if p.is_dir() and p.name != self.name]
        if others:
            # The last group to go disables them: hand what this run enabled to the others'
            # owner records (a run that overlapped ours found them enabled and enabled nothing;
            # without this, +cpu stayed in the root for good after both ended).
            handed = [p.name for p in others if _add_enabled(p, self.enabled)]
            log.debug("leaving %s enabled in %s: %s may use it (handed to %s)", self.enabled,
                      root, [p.name for p in others], handed)
            self.enabled.clear()
            return
        while self.enabled:
            controller = self.enabled.pop()
            try:
                (root / "cgroup.subtree_control").write_text(f"-{controller}")
            except OSError as e:  # EBUSY: a group made since uses it
                log.debug("leaving %s enabled in %s: %s", controller, root, e.strerror or e)

    def _take_handover(self) -> None:
        """Controllers an overlapping run that ended first handed to this group's owner
        record (``_disable_root``): this run now disables them when it is the last."""
        if self.mode.kind != "v2" or self.mode.cpu_root is None:
            return
        record = _read_owner(self.mode.cpu_root / self.name)
        handed = record.get("enabled") if record is not None else None
        for controller in handed if isinstance(handed, list) else []:
            if controller in ("cpu", "cpuset") and controller not in self.enabled:
                self.enabled.append(controller)

    def _write_cpusets(self) -> None:
        """CPUs (and, on v1, memory nodes) of the parent first, then of each child."""
        assert self.mode.cpuset_root is not None
        base = self.mode.cpuset_root / self.name
        plan = {base: self.service_cpus + self.tools_cpus, base / "service": self.service_cpus,
                base / "tools": self.tools_cpus}
        mems = None
        if self.mode.kind == "v1":
            mems = (self.mode.cpuset_root / "cpuset.effective_mems").read_text().strip()
            if not mems:
                mems = (self.mode.cpuset_root / "cpuset.mems").read_text().strip()
        for path, cpus in plan.items():
            if self.mode.kind == "v2" and path == base:
                continue  # v2: a child's cpuset.cpus need only be within the parent's effective
            (path / "cpuset.cpus").write_text(format_cpu_list(cpus))
            if mems is not None:
                (path / "cpuset.mems").write_text(mems)

    def _join_tools(self) -> None:
        assert self.mode.cpuset_root is not None
        origin = _own_cpuset(self.mode)
        if origin is None:
            return
        # Recorded before the move: interrupted right after it, remove() still moves us back.
        self.joined_from = origin
        (self.mode.cpuset_root / self.name / "tools" / "cgroup.procs").write_text(
            str(os.getpid()))

    def _leave_tools(self) -> None:
        if self.joined_from is None or self.mode.cpuset_root is None:
            return
        home = self.mode.cpuset_root / self.joined_from.lstrip("/") / "cgroup.procs"
        try:
            home.write_text(str(os.getpid()))
        except OSError:
            # Our old cpuset is gone: the hierarchy's root always takes us.
            (self.mode.cpuset_root / "cgroup.procs").write_text(str(os.getpid()))
        self.joined_from = None

    def pids(self, child: str) -> list[int]:
        out: set[int] = set()
        for root in self._all_roots():
            with contextlib.suppress(OSError):
                text = (root / self.name / child / "cgroup.procs").read_text()
                out.update(int(x) for x in text.split())
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

    def remove(self, timeout: float = 10.0) -> list[str]:
        """Move autotune out of ``tools/``, kill what is still inside, then remove the
        directories (children first) in every hierarchy, the cpuset one included."""
        if self.mode.kind == "affinity":
            return []
        self._take_handover()
        self._leave_tools()
        leftovers = []
        me = os.getpid()
        for child in CHILDREN:
            for pid in self.pids(child):
                if pid == me:
                    continue
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
                leftovers.append(f"pid {pid} in {child}")
        roots = self._all_roots()
        targets = [r / self.name / child for r in roots for child in CHILDREN]
        targets += [r / self.name for r in roots]
        deadline = self.clock.monotonic() + timeout
        for path in sorted(set(targets), key=lambda p: (-len(p.parts), str(p))):
            self._rmdir(path, deadline)
        self.dirs.clear()
        self._disable_root()
        return leftovers

    def _rmdir(self, path: Path, deadline: float) -> None:
        """Remove one cgroup directory, retrying while its last tasks finish exiting."""

        def removed() -> bool:
            try:
                path.rmdir()
            except FileNotFoundError:
                return True
            except OSError:
                return False
            return True

        def stuck(_: object) -> PrerequisiteError:
            return PrerequisiteError(f"cannot remove cgroup {path}: "
                                     f"still holds {self._procs(path)}")

        wait_until(self.clock, removed, max(0.0, deadline - self.clock.monotonic()), 0.02,
                   error=stuck)


def stale(prefix: str, mode: Mode) -> list[CpuLimit]:
    """Cgroups named exactly ``<prefix>-<pid>`` whose creating run is gone (in any hierarchy;
    see the module docstring for how that is known)."""
    pattern = re.compile(rf"{re.escape(prefix)}-(\d+)")
    groups: dict[str, list[Path]] = {}
    for root in (mode.cpu_root, mode.acct_root, mode.cpuset_root):
        if root is None:
            continue
        for path in root.glob(f"{prefix}-*"):
            if pattern.fullmatch(path.name) and path.is_dir():
                groups.setdefault(path.name, []).append(path)
    found = []
    for name, paths in sorted(groups.items()):
        owner = next((o for o in map(_read_owner, paths) if o is not None), None)
        pid = int(name.rsplit("-", 1)[1])
        if ownership.alive(owner, pid):
            if owner is not None and ownership.foreign(owner):
                log.info("cgroup %s: made by pid %s of another PID namespace, whose run lock "
                         "(%s) this run does not hold: left to that experiment's next run",
                         name, owner.get("pid"), owner.get("lock_path"))
            continue
        enabled = owner.get("enabled") if owner is not None else None
        # Controllers the dead run enabled in the root: remove() disables them again (unless
        # another autotune group may use them). Without a record (no xattrs), left enabled.
        found.append(CpuLimit(mode=mode, cpus=1.0, name=name, enabled=[
            c for c in (enabled if isinstance(enabled, list) else []) if c in ("cpu", "cpuset")]))
    return found
