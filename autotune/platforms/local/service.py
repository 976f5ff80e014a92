"""The local target: the service runs on this machine in a CPU-limited cgroup, restarted with each
candidate's environment, and driven by the open-loop load generator (127.0.0.1 only).

Each restart is a new *generation*: its own ports (unless ``target.local.port`` fixes the
service's), and the label ``autotune_generation`` on every series scraped from it, so no query can
mix two configurations. The next generation's ports are chosen, and announced to our private
Prometheus, while the current one runs (see ``autotune.platforms.local.prometheus``): a port
that got taken in the meantime is not used, and its generation number is skipped, so a label is
only ever on series from our own processes of that generation.

With ``load.rate: auto`` the first ``apply`` calibrates the load once (``calibrate_load``:
calibrate.py chooses the rates, loadgen.py measures each). The noise probe is noise.py.

Secrets stay where they are used (see ``autotune.redaction``). The service gets autotune's
environment without autotune's own variables (``AUTOTUNE_*``, the storage URL among them) and
without the variable ``prometheus.token_env`` names, plus its ``env`` and the candidate's; the load
generator gets only PATH, HOME, the locale and the Go runtime's variables (and every process
``proc.start``'s mark, ``proc.MARK_VAR``). The load's path, headers and body reach the generator
through a memory file it reads at start, never its argv (which any user can read in /proc) nor
the disk (loadgen.py starts it). ``describe()`` (the study's record of the
target, the nightly fingerprint, the reports) keeps the header names, the values of the content
headers and the body's size; the command's arguments without the credentials of URLs and the
values of arguments named like secrets.

Its size (~430 lines) is the service's lifecycle per generation (ports, cgroup, start, health,
restore); driving the load generator is in loadgen.py and the host's noise in noise.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import requests

from autotune import redaction
from autotune.clock import Clock, wait_until
from autotune.errors import TargetError
from autotune.experiment.models import Experiment, LocalTarget
from autotune.insight import capture, schedtrace
from autotune.live import Live, Matcher, Window
from autotune.platforms.local import calibrate, cgroups, gobuild, proc, prometheus
from autotune.platforms.local.cgroups import CpuLimit
from autotune.platforms.local.loadgen import LoadGenerator
from autotune.platforms.local.noise import HostNoise
from autotune.platforms.local.ports import free_port, port_free
from autotune.targets.base import Env, NoiseProbe

log = logging.getLogger(__name__)

SERVICE_JOB = "autotune-service"
LOADGEN_JOB = "autotune-loadgen"
GENERATION_LABEL = "autotune_generation"
POLL = 0.01
"""Seconds between health checks while the service comes up."""

Announce = Callable[[Mapping[str, str], Mapping[str, str]], None]


def _metric_value(text: str, name: str) -> str | None:
    match = re.search(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)", text, re.MULTILINE)
    return match.group(0) if match else None


class LocalService:
    """Target: restart the service with the candidate env inside the CPU limit, then wait for
    its health endpoint; start a fresh load generator for the trial.

    ``announce(endpoints, labels)``, if given, is told the next generation's scrape targets
    ahead of time (the private Prometheus's ``announce``); ``prepare()``, if given, runs once,
    when the cgroups exist and before a load calibration (the private Prometheus's ``start``:
    it comes up, and discovers the first targets, while the calibration runs).
    """

    def __init__(
        self,
        exp: Experiment,
        limit: CpuLimit,
        registry: proc.Registry,
        logs: Path,
        clock: Clock,
        resolve: Callable[[str], Path],
        announce: Announce | None = None,
        prepare: Callable[[], object] | None = None,
    ) -> None:
        assert exp.target.local is not None
        self.exp, self.spec = exp, exp.target.local
        self.limit, self.registry, self.logs, self.clock = limit, registry, logs, clock
        self._resolve, self.announce, self._prepare = resolve, announce, prepare
        self.load_generator = LoadGenerator(self.spec.load, limit, registry, logs, clock,
                                            self.resolve)
        self._binaries: dict[str, Path] = {}
        self._used_ports: set[int] = set()
        self.port = self.spec.port or 0
        self.load_port = 0
        self._planned: tuple[int, int, int] | None = None
        self.service: proc.Process | None = None
        self.loadgen: proc.Process | None = None
        self.generation = 0
        self.facts: dict[str, Any] = {}
        self.calibration: calibrate.Calibration | None = None
        rate = self.spec.load.rate
        self.load_rate: float | None = None if rate == "auto" else float(rate)
        self._created = False
        self._log_offset = 0
        self._started_wall = 0.0
        self._plan_next()

    def resolve(self, workload: str) -> Path:
        """The built workload binary, resolved (and built if needed) once per run."""
        if workload not in self._binaries:
            self._binaries[workload] = self._resolve(workload)
        return self._binaries[workload]

    # --- describing ------------------------------------------------------------------------

    def _argv(self, port: int) -> list[str]:
        spec: LocalTarget = self.spec
        if spec.command is not None:
            return [a.replace("{port}", str(port)) for a in spec.command]
        binary = self.resolve(spec.workload or "demo")
        return [str(binary), "-addr", f"127.0.0.1:{port}"]

    def describe(self) -> dict[str, Any]:
        load = redaction.load_spec(self.spec.load.model_dump(mode="json"))  # ?api_key=... too
        out: dict[str, Any] = {
            "kind": "local",
            "workload": "command" if self.spec.command else (self.spec.workload or "demo"),
            "command": redaction.argv(self.spec.command) if self.spec.command else None,
            "cpus": self.spec.cpus,
            **self.limit.facts(),
            "load": load,
            "load_rate": self.load_rate if self.load_rate is not None
            else "auto (calibrated at the first apply)",
            "host_cpus": os.cpu_count(),
            **self.facts,
        }
        if self.calibration is not None:
            out["load_calibration"] = self.calibration.record()
        binary = self._binary()
        if binary is not None:  # the nightly fingerprint: which build, which Go
            out.update(gobuild.binary_facts(binary))
        return out

    def _binary(self) -> Path | None:
        if self.spec.command is None:
            return self.resolve(self.spec.workload or "demo")
        found = shutil.which(self.spec.command[0], path=os.environ.get("PATH"))
        path = Path(found) if found else Path(self.spec.cwd or ".") / self.spec.command[0]
        return path if path.is_file() else None

    # --- ports and generations -------------------------------------------------------------

    def _fresh_port(self) -> int:
        while True:
            port = free_port()
            if port not in self._used_ports:
                self._used_ports.add(port)
                return port

    def _endpoints_for(self, port: int, load_port: int) -> dict[str, str]:
        endpoints = {LOADGEN_JOB: f"http://127.0.0.1:{load_port}/metrics"}
        if self.spec.metrics_path is not None:
            endpoints[SERVICE_JOB] = f"http://127.0.0.1:{port}{self.spec.metrics_path}"
        return endpoints

    def _plan_next(self) -> None:
        """Choose the next generation's ports and announce its scrape targets. A fixed service
        port is not announced: the running generation still answers there."""
        generation = self.generation + 1
        port = self.spec.port or self._fresh_port()
        load_port = self._fresh_port()
        self._planned = (generation, port, load_port)
        if self.announce is not None:
            endpoints = self._endpoints_for(port, load_port)
            if self.spec.port is not None:
                endpoints.pop(SERVICE_JOB, None)
            self.announce(endpoints, {GENERATION_LABEL: str(generation)})

    def _next_generation(self) -> None:
        """Take the planned ports if nothing else listens there; else skip that generation
        number (a stranger's series may carry its label) and take new ports."""
        self.generation += 1
        planned, self._planned = self._planned, None
        if planned is not None and planned[0] == self.generation:
            _, port, load_port = planned
            fresh = [load_port] + ([port] if self.spec.port is None else [])
            if all(port_free(p) for p in fresh):
                self.port, self.load_port = port, load_port
                return
            log.warning("a planned port (%s) was taken by another process; using new ones",
                        fresh)
            self.generation += 1
        self.port = self.spec.port or self._fresh_port()
        self.load_port = self._fresh_port()

    def _check_fixed_port(self) -> None:
        """A fixed ``target.local.port`` must be free when our service is to bind it: with
        another process listening there (a service left from an earlier session, someone's
        server), the health check would pass on its answers and the trial would measure it, and
        the load generator would send it the configured headers."""
        port = self.spec.port
        if port is not None and not port_free(port):
            raise TargetError(
                f"target.local.port {port}: another process already listens on 127.0.0.1:{port}"
                " (autotune's own service was stopped before this check); stop it, or leave "
                "target.local.port out to have a free port picked")

    # --- the protocol ----------------------------------------------------------------------

    def _ensure_limit(self) -> None:
        if not self._created:
            # Marked first: interrupted half-way through create(), the restore() that follows
            # must still remove the directories already made (remove() skips missing ones).
            self._created = True
            try:
                self.limit.create()
            except Exception:
                # An error: undo what was made now, and let the next apply try again.
                with contextlib.suppress(Exception):
                    self.limit.remove()
                self._created = False
                raise
        if self._prepare is not None:
            prepare, self._prepare = self._prepare, None
            prepare()

    def _service_env(self, env: Env) -> dict[str, str]:
        full = redaction.child_env([self.exp.prometheus.token_env])
        for p in self.exp.parameters:
            full.pop(p.env_var, None)  # "unset" must mean unset, whatever the caller's shell has
        full.update(self.spec.env)
        full.update({k: v for k, v in env.items() if v is not None})
        if self.exp.measure.capture:
            full["DEBUG_PPROF"] = "1"  # the demo mounts net/http/pprof for the captures
        if any(s.blocked_p is not None for s in self.exp.chaos.runs()):
            full["DEMO_CHAOS"] = "1"  # the demo's endpoint for held Ps (a scenario injects them)
        period_ms = self.exp.measure.schedtrace_ms
        if period_ms is not None:
            full["GODEBUG"] = schedtrace.merge_godebug(full.get("GODEBUG"), period_ms)
        return full

    def _start_service(self, env: Env, port: int) -> proc.Process:
        log_path = self.logs / "service.log"
        # Where this generation's output starts, and when its runtime's clock started (the
        # SCHED lines count milliseconds from there): to cut a window out of the log.
        self._log_offset = log_path.stat().st_size if log_path.exists() else 0
        self._started_wall = self.clock.now()
        service = proc.start(
            self._argv(port), role="service", env=self._service_env(env), cwd=self.spec.cwd,
            registry=self.registry, log_path=self.logs / "service.log",
            cgroup_procs=self.limit.procs_files("service"), cpus=self.limit.cpu_set or None,
        )
        try:
            self._wait_healthy(service, port)
        except BaseException:
            service.stop(clock=self.clock)
            raise
        return service

    def apply(self, env: Env) -> Live:
        self._ensure_limit()
        self._stop_children()
        rate = self._load_rate()
        self._next_generation()
        self._check_fixed_port()
        try:
            self.service = self._start_service(env, self.port)
            since = self.clock.now()
            self.loadgen = self.load_generator.start(rate, self.port, self.load_port,
                                                     int(self.exp.max_trial_seconds) + 60)
        finally:
            self._plan_next()  # also after a failure: the next apply should not wait either
        details: dict[str, Any] = {"pid": self.service.pid, "generation": self.generation,
                                   **self.limit.facts(), "cpus": self.spec.cpus,
                                   "load_rate": rate}
        details.update(self._runtime_facts())
        self.facts.update({k: details[k] for k in ("go_version",) if k in details})
        return Live(
            env=dict(env), since=since,
            scope=(Matcher(GENERATION_LABEL, str(self.generation)),),
            placement={"cgroup_procs": self.limit.procs_files("service"),
                       "cpus": sorted(self.limit.cpu_set), "service_pid": self.service.pid,
                       "service_url": f"http://127.0.0.1:{self.port}"},
            details=details,
            endpoints=self._endpoints_for(self.port, self.load_port),
        )

    def _wait_healthy(self, service: proc.Process, port: int) -> None:
        url = f"http://127.0.0.1:{port}{self.spec.health}"
        last = "no answer"

        def healthy() -> bool:
            nonlocal last
            if not service.running():
                raise TargetError(f"the service exited with code {service.returncode} before "
                                  f"it was healthy; last output:\n{service.tail()}")
            try:
                r = requests.get(url, timeout=1.0)
            except requests.RequestException as e:
                last = type(e).__name__
                return False
            last = f"HTTP {r.status_code}"
            return r.status_code == 200

        wait_until(self.clock, healthy, self.spec.ready_timeout, POLL, error=lambda _: TargetError(
            f"{url} not healthy after {self.spec.ready_timeout:g}s ({last})"))

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

    # --- load calibration ------------------------------------------------------------------

    def _load_rate(self) -> float:
        if self.load_rate is not None:
            return self.load_rate
        if self.calibration is None:
            self.calibrate_load()
        assert self.calibration is not None
        if self.calibration.rate is None:
            raise TargetError(f"load.rate auto: calibration failed: {self.calibration.problem}")
        return self.calibration.rate

    def calibrate_load(self) -> calibrate.Calibration:
        """Measure the capacity of the service (baseline settings, no stress) under its CPU
        limit and set the load to ``auto_fraction`` of it; once per run (the result, a failure
        included, is kept). Its own ports: nothing it runs is scraped."""
        self._ensure_limit()
        baseline = {p.env_var: (None if (v := self.exp.baseline.params.get(p.name)) is None
                                else p.format(v)) for p in self.exp.parameters}
        port = self.spec.port or self._fresh_port()
        service = self._start_service(baseline, port)
        try:
            result = calibrate.run(lambda rate: self._calibration_step(service, port, rate),
                                   self.clock, self.spec.load.auto_fraction)
        finally:
            service.stop(clock=self.clock)
        self.calibration = result
        self.load_rate = result.rate
        if result.rate is None:
            log.error("load calibration failed: %s", result.problem)
        elif result.note:
            log.warning("load calibration: %s", result.note)
        else:
            log.info("load calibration: capacity %g/s (%d steps, %.1fs); load %g/s = %g x "
                     "capacity", result.capacity, len(result.steps), result.seconds,
                     result.rate, result.fraction)
        return result

    def _calibration_step(self, service: proc.Process, port: int,
                          rate: float) -> calibrate.Step:
        if not service.running():
            raise calibrate.StepFailed(f"the service exited (code {service.returncode}) during "
                                       f"the calibration; last output:\n{service.tail()}")
        return self.load_generator.measure(rate, port, self._fresh_port())

    # --- the rest of the protocol ----------------------------------------------------------

    def check(self, live: Live) -> Mapping[str, Any]:
        if self.generation != live.details.get("generation"):
            raise TargetError("the service was restarted with other settings during the window")
        if self.service is None or not self.service.running():
            code = self.service.returncode if self.service else None
            raise TargetError(f"the service exited (code {code}) during the window; "
                              f"last output:\n{self.service.tail() if self.service else ''}")
        if self.loadgen is None or not self.loadgen.running():
            raise TargetError("the load generator exited during the window")
        return {}

    def pprof(self, live: Live) -> capture.Transport | str:
        """The demo's own port (it mounts net/http/pprof with DEBUG_PPROF=1, set for captures)."""
        for job, url in live.endpoints.items():
            if "service" in job:
                scheme, rest = url.split("://", 1)
                return capture.Direct(f"{scheme}://{rest.split('/', 1)[0]}")
        return "the local service has no endpoint in this candidate"

    def schedtrace(self, live: Live, window: Window) -> schedtrace.Trace | str:
        """The SCHED lines the service printed during ``window`` (``measure.schedtrace``),
        with times re-based to the window's start."""
        if self.exp.measure.schedtrace_period is None:
            return "measure.schedtrace is off"
        if self.service is None or live.details.get("generation") != self.generation:
            return "the service that ran in the window is gone"
        path = self.logs / "service.log"
        with path.open("rb") as f:
            f.seek(self._log_offset)
            text = f.read().decode(errors="replace")
        parser = schedtrace.Parser()
        samples = parser.feed(text)  # not close(): the line being written is not cut off
        inside = []
        for s in samples:
            at = self._started_wall + s.at_ms / 1000
            if window.start <= at <= window.end:
                inside.append(dataclasses.replace(s, at_ms=round((at - window.start) * 1000)))
        return schedtrace.Trace(tuple(inside), parser.skipped, tuple(parser.reasons))

    def _stop_children(self) -> None:
        running = [p for p in (self.loadgen, self.service) if p is not None]
        if running:
            proc.stop_all(running, clock=self.clock)
        self.loadgen = self.service = None

    def restore(self, best: Env | None = None) -> None:
        """Stop the service and the load; remove the cgroups. Nothing of ours stays behind
        (a local service has nothing to keep ``best`` on)."""
        self._stop_children()
        if self._created:
            self.limit.remove()
            self._created = False

    def cleanup(self) -> list[str]:
        """Stop processes a dead run of this experiment left, and remove its cgroups and its
        private Prometheus's data (review finding: only the next run's Prometheus removed it,
        so `autotune cleanup` left it, though docs/local.md said otherwise)."""
        done = self.registry.stop_leftovers()
        prefix = self.limit.name.rsplit("-", 1)[0]
        for stale in cgroups.stale(prefix, self.limit.mode):
            killed = stale.remove()
            done.append(f"cgroup {stale.name}" + (f" ({', '.join(killed)})" if killed else ""))
        for tsdb in prometheus.remove_stale(self.logs.parent.resolve()):
            done.append(f"the private Prometheus's data {tsdb.name}/")
        return done

    def noise_probe(self) -> NoiseProbe | None:
        return HostNoise(self.limit, self.registry)
