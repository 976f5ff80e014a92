"""Local CPU stress exactly as Chaos Mesh's chaos-daemon runs it, inside the service's cgroup.

Memory stress (``stress.memory``): Chaos Mesh's memory stressor runs memStress, which splits
``size`` over its workers, writes each page once and then holds it; stress-ng's ``--vm W
--vm-bytes N --vm-hang 0`` does the same here (stress-ng also splits N over the W workers;
``--vm-hang 0`` holds the memory instead of rewriting it, which would burn a CPU per worker).
Sizes in bytes: KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024, as Chaos Mesh reads them.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune import pids, redaction
from autotune.chaos.base import Injection
from autotune.clock import Clock, wait_until
from autotune.errors import ChaosError, StressNotRecovered
from autotune.experiment.models import Stress
from autotune.live import Live
from autotune.platforms.local import proc

VERIFY_TIMEOUT = 10.0
RECOVER_TIMEOUT = 15.0
POLL = 0.02


def stress_ng_binary() -> str:
    return proc.find_binary("stress-ng", "AUTOTUNE_STRESS_NG", "stress-ng")


_UNITS = {"B": 1, "KB": 10**3, "KiB": 2**10, "MB": 10**6, "MiB": 2**20, "GB": 10**9,
          "GiB": 2**30}


def vm_bytes(size: str) -> str:
    """``256MB`` -> ``256000000`` (stress-ng reads a bare number as bytes); ``50%`` as is."""
    if size.endswith("%"):
        return size
    number = size.rstrip("BKMGi")
    return str(int(number) * _UNITS[size[len(number):]])


def workers(stress: Stress) -> int:
    """The worker processes stress-ng starts for this stress."""
    return stress.workers + (stress.memory.workers if stress.memory is not None else 0)


def argv(binary: str, stress: Stress, duration: float) -> list[str]:
    # --cpu 0 would mean one worker per CPU: a memory-only stress leaves --cpu out.
    cpu = (["--cpu-load-slice", "10", "--cpu-method", "sqrt", "--cpu", str(stress.workers),
            "--cpu-load", str(stress.load)] if stress.workers else [])
    memory = (["--vm", str(stress.memory.workers), "--vm-bytes", vm_bytes(stress.memory.size),
               "--vm-hang", "0"] if stress.memory is not None else [])
    return [binary, *cpu, *memory, "--timeout", f"{max(1, math.ceil(duration))}s"]


def _cgroup_pids(procs_file: str) -> set[int]:
    try:
        return {int(x) for x in Path(procs_file).read_text().split()}
    except OSError:
        return set()


class StressNgInjector:
    def __init__(self, registry: proc.Registry, clock: Clock, logs: Path | None = None) -> None:
        self.registry, self.clock = registry, clock
        self.running: dict[str, proc.Process] = {}
        self.log_path = logs / "stress-ng.log" if logs is not None else None
        """stress-ng's own words (why it exited at once: an option this version lacks)."""

    def inject(self, live: Live, stress: Stress, duration: float,
               labels: Mapping[str, str]) -> Injection:
        procs_files = list(live.placement.get("cgroup_procs", []))
        cpus = set(live.placement.get("cpus", []))
        if not procs_files and not cpus:
            raise ChaosError("the target did not say where it runs (no cgroup, no CPU set)")
        inj_id = f"stress-ng-{labels.get('autotune/trial', 'x')}-{uuid.uuid4().hex[:6]}"
        # Where this stress-ng's words start in the log every injection appends to.
        offset = (self.log_path.stat().st_size
                  if self.log_path is not None and self.log_path.exists() else 0)
        p = proc.start(argv(stress_ng_binary(), stress, duration), role="stress-ng",
                       env=redaction.tool_env(),  # none of autotune's secrets
                       registry=self.registry, log_path=self.log_path,
                       cgroup_procs=procs_files, cpus=cpus or None)
        self.running[inj_id] = p
        try:
            details = self._verify(p, stress, procs_files, offset)
        except BaseException:
            self._stop(inj_id)
            raise
        return Injection(id=inj_id, started=self.clock.now(), details=details)

    def _said(self, offset: int) -> str:
        """What stress-ng wrote to its log from ``offset`` (its last 5 lines)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as f:
            f.seek(offset)
            return "\n".join(f.read().decode(errors="replace").splitlines()[-5:])

    def _verify(self, p: proc.Process, stress: Stress, procs_files: list[str],
                offset: int) -> dict[str, Any]:
        """Wait until the workers exist, sit in the service's cgroup(s) and have burned CPU
        (workers are fresh processes: any CPU time at all is theirs)."""

        def verified() -> dict[str, Any] | None:
            if not p.running():
                said = self._said(offset)
                raise ChaosError(f"stress-ng exited with code {p.returncode} right after start"
                                 + (f"; it said:\n{said}" if said else ""))
            members = set(proc.group_members(p.pid))
            running = members - {p.pid}
            if len(running) < workers(stress):
                return None
            for path in procs_files:
                if not members <= _cgroup_pids(path):
                    raise ChaosError(f"stress-ng workers are not inside the service's cgroup "
                                     f"({Path(path).parent})")
            burned = sum(pids.cpu_seconds(w) for w in running)
            if burned <= 0:
                return None
            return {"pid": p.pid, "workers": sorted(running), "cpu_in_check": burned,
                    "in_cgroup": bool(procs_files)}

        return wait_until(self.clock, verified, VERIFY_TIMEOUT, POLL, error=lambda _: ChaosError(
            f"stress-ng workers not running {VERIFY_TIMEOUT:g}s after start"))

    def _stop(self, inj_id: str) -> None:
        p = self.running.pop(inj_id, None)
        if p is None:
            return
        ours = proc.group_is_ours(p)  # not once its number leads a stranger's group
        p.stop(grace=RECOVER_TIMEOUT / 2, clock=self.clock)
        left = proc.group_members(p.pid) if ours else []
        if left:
            raise StressNotRecovered(
                f"stress-ng processes {left} still running after SIGKILL; check "
                f"`ps -o pid,stat,cmd -g {p.pid}`", objects=[str(x) for x in left])

    def recover(self, injection: Injection) -> None:
        self._stop(injection.id)

    def active(self) -> list[str]:
        return [i for i, p in self.running.items()
                if proc.group_is_ours(p) and proc.group_members(p.pid)]

    def cleanup(self) -> list[str]:
        done = []
        for inj_id in list(self.running):
            self._stop(inj_id)
            done.append(inj_id)
        done += self.registry.stop_leftovers(roles=("stress-ng",), clock=self.clock)
        return done
