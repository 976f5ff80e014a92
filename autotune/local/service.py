"""The local target: the service runs on this machine in a CPU-limited cgroup, restarted with each
candidate's environment, and driven by the open-loop load generator (127.0.0.1 only)."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from autotune import pids
from autotune.clock import Clock
from autotune.errors import PrerequisiteError, TargetError
from autotune.experiment.models import Experiment, LocalTarget
from autotune.live import Live, Matcher
from autotune.local import cgroups, proc
from autotune.local.cgroups import CpuLimit
from autotune.targets.base import Env, NoiseProbe

log = logging.getLogger(__name__)

SERVICE_JOB = "autotune-service"
LOADGEN_JOB = "autotune-loadgen"
GENERATION_LABEL = "autotune_generation"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metric_value(text: str, name: str) -> str | None:
    match = re.search(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)", text, re.MULTILINE)
    return match.group(0) if match else None


class LocalService:
    """Target: restart the service with the candidate env inside the CPU limit, then wait for
    its health endpoint; start a fresh load generator for the trial."""

    def __init__(
        self,
        exp: Experiment,
        limit: CpuLimit,
        registry: proc.Registry,
        logs: Path,
        clock: Clock,
        resolve: Callable[[str], Path],
    ) -> None:
        assert exp.target.local is not None
        self.exp, self.spec = exp, exp.target.local
        self.limit, self.registry, self.logs, self.clock = limit, registry, logs, clock
        self.resolve = resolve
        self.port = self.spec.port or free_port()
        self.load_port = free_port()
        self.service: proc.Process | None = None
        self.loadgen: proc.Process | None = None
        self.generation = 0
        self.facts: dict[str, Any] = {}
        self._created = False

    # --- describing ------------------------------------------------------------------------

    def _argv(self) -> list[str]:
        spec: LocalTarget = self.spec
        if spec.command is not None:
            return [a.replace("{port}", str(self.port)) for a in spec.command]
        binary = self.resolve(spec.workload or "demo")
        return [str(binary), "-addr", f"127.0.0.1:{self.port}"]

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "local",
            "workload": "command" if self.spec.command else (self.spec.workload or "demo"),
            "command": list(self.spec.command) if self.spec.command else None,
            "cpus": self.spec.cpus,
            "isolation": self.limit.isolation,
            "isolation_note": self.limit.mode.reason,
            "load": self.spec.load.model_dump(mode="json"),
            "host_cpus": os.cpu_count(),
            **self.facts,
        }

    # --- the protocol ----------------------------------------------------------------------

    def _ensure_limit(self) -> None:
        if not self._created:
            self.limit.create()
            self._created = True

    def _service_env(self, env: Env) -> dict[str, str]:
        full = dict(os.environ)
        for p in self.exp.parameters:
            full.pop(p.env_var, None)  # "unset" must mean unset, whatever the caller's shell has
        full.update(self.spec.env)
        full.update({k: v for k, v in env.items() if v is not None})
        return full

    def apply(self, env: Env) -> Live:
        self._ensure_limit()
        self._stop_children()
        self.generation += 1
        argv = self._argv()
        self.service = proc.start(
            argv, role="service", env=self._service_env(env), cwd=self.spec.cwd,
            registry=self.registry, log_path=self.logs / "service.log",
            cgroup_procs=self.limit.procs_files("service"), cpus=self.limit.cpu_set or None,
        )
        self._wait_healthy(self.service)
        since = self.clock.now()
        self._start_loadgen()
        details: dict[str, Any] = {"pid": self.service.pid, "generation": self.generation,
                                   "isolation": self.limit.isolation, "cpus": self.spec.cpus}
        details.update(self._runtime_facts())
        self.facts.update({k: details[k] for k in ("go_version",) if k in details})
        return Live(
            env=dict(env), since=since,
            scope=(Matcher(GENERATION_LABEL, str(self.generation)),),
            placement={"cgroup_procs": self.limit.procs_files("service"),
                       "cpus": sorted(self.limit.cpu_set), "service_pid": self.service.pid},
            details=details,
            endpoints=self._endpoints(),
        )

    def _endpoints(self) -> dict[str, str]:
        endpoints = {LOADGEN_JOB: f"http://127.0.0.1:{self.load_port}/metrics"}
        if self.spec.metrics_path is not None:
            endpoints[SERVICE_JOB] = f"http://127.0.0.1:{self.port}{self.spec.metrics_path}"
        return endpoints

    def _wait_healthy(self, service: proc.Process) -> None:
        url = f"http://127.0.0.1:{self.port}{self.spec.health}"
        deadline = time.monotonic() + self.spec.ready_timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if not service.running():
                raise TargetError(f"the service exited with code {service.returncode} before "
                                  f"it was healthy; last output:\n{service.tail()}")
            try:
                r = requests.get(url, timeout=1.0)
                if r.status_code == 200:
                    return
                last = f"HTTP {r.status_code}"
            except requests.RequestException as e:
                last = type(e).__name__
            time.sleep(0.05)
        raise TargetError(f"{url} not healthy after {self.spec.ready_timeout:g}s ({last})")

    def _runtime_facts(self) -> dict[str, Any]:
        """What the Go runtime says it runs with (GOMAXPROCS chosen when unset, Go version)."""
        if self.spec.metrics_path is None:
            return {}
        try:
            text = requests.get(f"http://127.0.0.1:{self.port}{self.spec.metrics_path}",
                                timeout=2.0).text
        except requests.RequestException:
            return {}
        facts: dict[str, Any] = {}
        gomaxprocs = _metric_value(text, "go_sched_gomaxprocs_threads")
        if gomaxprocs:
            facts["gomaxprocs_effective"] = int(float(gomaxprocs.split()[-1]))
        version = re.search(r'^go_info\{[^}]*version="([^"]+)"', text, re.MULTILINE)
        if version:
            facts["go_version"] = version.group(1)
        return facts

    def _start_loadgen(self) -> None:
        load = self.spec.load
        argv = [
            str(self.resolve("loadgen")),
            "-target", f"http://127.0.0.1:{self.port}{load.path}",
            "-rate", f"{load.rate:g}",
            "-listen", f"127.0.0.1:{self.load_port}",
            "-connections", str(load.connections),
            "-method", load.method,
            "-timeout", f"{load.timeout:g}s",
            # A dead-man switch: the load stops by itself even if we are killed.
            "-max-duration", f"{int(self.exp.max_trial_seconds) + 60}s",
        ]
        if load.body:
            argv += ["-body", load.body]
        for key, value in load.headers.items():
            argv += ["-header", f"{key}: {value}"]
        self.loadgen = proc.start(argv, role="loadgen", registry=self.registry,
                                  log_path=self.logs / "loadgen.log",
                                  cgroup_procs=self.limit.procs_files("tools"))
        url = f"http://127.0.0.1:{self.load_port}/healthz"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not self.loadgen.running():
                raise PrerequisiteError(f"the load generator exited: {self.loadgen.tail()}")
            try:
                if requests.get(url, timeout=1.0).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise TargetError("the load generator did not come up in 10s")

    def check(self, live: Live) -> None:
        if self.generation != live.details.get("generation"):
            raise TargetError("the service was restarted with other settings during the window")
        if self.service is None or not self.service.running():
            code = self.service.returncode if self.service else None
            raise TargetError(f"the service exited (code {code}) during the window; "
                              f"last output:\n{self.service.tail() if self.service else ''}")
        if self.loadgen is None or not self.loadgen.running():
            raise TargetError("the load generator exited during the window")

    def _stop_children(self) -> None:
        for p in (self.loadgen, self.service):
            if p is not None:
                p.stop()
        self.loadgen = self.service = None

    def restore(self, best: Env | None = None) -> None:
        """Stop the service and the load; remove the cgroups. Nothing of ours stays behind
        (a local service has nothing to keep ``best`` on)."""
        self._stop_children()
        if self._created:
            self.limit.remove()
            self._created = False

    def cleanup(self) -> list[str]:
        """Stop processes a dead run of this experiment left, and remove its cgroups."""
        done = self.registry.stop_leftovers()
        prefix = self.limit.name.rsplit("-", 1)[0]
        for stale in cgroups.stale(prefix, self.limit.mode):
            killed = stale.remove()
            done.append(f"cgroup {stale.name}" + (f" ({', '.join(killed)})" if killed else ""))
        return done

    def noise_probe(self) -> NoiseProbe | None:
        return HostNoise(self.limit, self.registry)


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
        self._start = (time.monotonic(), _host_busy_seconds(), self._ours())

    def end(self) -> float:
        assert self._start is not None, "begin() first"
        t0, busy0, ours0 = self._start
        elapsed = max(1e-3, time.monotonic() - t0)
        foreign = (_host_busy_seconds() - busy0) - (self._ours() - ours0)
        return max(0.0, foreign / elapsed)
