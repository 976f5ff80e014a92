"""The local target's load: the open-loop load generator (tools/loadgen) started as a process of
ours in the tools cgroup, aimed at the service on 127.0.0.1, with its own ``/metrics`` port.

One process per trial, and one per calibration step: its rate is fixed per process
(calibrate.py decides the rates and judges the steps; ``LoadGenerator.measure`` runs one).

The load's headers and body reach the generator through a memory file it reads at start, never
its argv (which any user can read in /proc) nor the disk; its environment is only PATH, HOME,
the locale and the Go runtime's variables (``redaction.tool_env``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import requests

from autotune import redaction
from autotune.clock import Clock, wait_until
from autotune.errors import PrerequisiteError, TargetError
from autotune.experiment.models import LoadSpec
from autotune.platforms.local import calibrate, proc
from autotune.platforms.local.cgroups import CpuLimit

POLL = 0.01
"""Seconds between health checks while the generator comes up."""
READY_TIMEOUT = 10.0


class LoadGenerator:
    """Starts the load generator for ``load`` (the experiment's ``target.local.load``).

    ``resolve(workload)`` gives the built binary (the service's, which builds it once per run).
    """

    def __init__(self, load: LoadSpec, limit: CpuLimit, registry: proc.Registry, logs: Path,
                 clock: Clock, resolve: Callable[[str], Path]) -> None:
        self.load, self.limit, self.registry, self.logs = load, limit, registry, logs
        self.clock, self._resolve = clock, resolve

    def start(self, rate: float, port: int, load_port: int, max_seconds: int) -> proc.Process:
        """Start the load generator (it sends at once: the service must already be healthy)
        and wait until its metrics endpoint answers."""
        load = self.load
        argv = [
            str(self._resolve("loadgen")),
            # The path (and its query, which may hold a key) comes in the request file.
            "-target", f"http://127.0.0.1:{port}",
            "-rate", f"{rate:g}",
            "-listen", f"127.0.0.1:{load_port}",
            "-connections", str(load.connections),
            "-method", load.method,
            "-timeout", f"{load.timeout:g}s",
            # A dead-man switch: the load stops by itself even if we are killed.
            "-max-duration", f"{max_seconds}s",
        ]
        with self._request_file() as request:
            gen = proc.start(argv + request, role="loadgen", env=redaction.tool_env(),
                             registry=self.registry, log_path=self.logs / "loadgen.log",
                             cgroup_procs=self.limit.procs_files("tools"))
            self._await(gen, load_port)
        return gen

    @contextlib.contextmanager
    def _request_file(self) -> Iterator[list[str]]:
        """The arguments that give the generator the load's path, headers and body: a memory
        file of ours (never on disk), which it opens by ``/proc/<our pid>/fd/<n>`` and reads as
        it starts; closed once it is up. Not its argv, which any user can read in /proc (review
        finding: ``path: /api?api_key=...`` was there, and in the generator's log)."""
        load = self.load
        fd = os.memfd_create("autotune-load-request", os.MFD_CLOEXEC)
        try:
            with open(fd, "wb", closefd=False) as f:
                f.write(json.dumps({"headers": dict(load.headers), "body": load.body,
                                    "path": load.path}).encode())
            yield ["-request-file", f"/proc/{os.getpid()}/fd/{fd}"]
        finally:
            os.close(fd)

    def _await(self, gen: proc.Process, load_port: int) -> None:
        url = f"http://127.0.0.1:{load_port}/healthz"

        def up() -> bool:
            if not gen.running():
                raise PrerequisiteError(f"the load generator exited: {gen.tail()}")
            try:
                return requests.get(url, timeout=1.0).status_code == 200
            except requests.RequestException:
                return False

        try:
            wait_until(self.clock, up, READY_TIMEOUT, POLL, error=lambda _: TargetError(
                f"the load generator did not come up in {READY_TIMEOUT:g}s"))
        except BaseException:
            gen.stop(clock=self.clock)
            raise

    def measure(self, rate: float, port: int, load_port: int) -> calibrate.Step:
        """One calibration step: a generator at ``rate`` for ``calibrate.SETTLE`` then
        ``calibrate.SPAN`` seconds, its counters read from its ``/metrics`` in between."""
        gen = self.start(rate, port, load_port, 60)
        url = f"http://127.0.0.1:{load_port}/metrics"

        def counters() -> calibrate.Counters:
            try:
                return calibrate.parse_counters(requests.get(url, timeout=2.0).text)
            except (requests.RequestException, ValueError) as e:
                raise calibrate.StepFailed(f"reading the load generator at {rate:g}/s: "
                                           f"{e}") from None

        try:
            self.clock.sleep(calibrate.SETTLE)
            before, t0 = counters(), self.clock.monotonic()
            self.clock.sleep(calibrate.SPAN)
            after, t1 = counters(), self.clock.monotonic()
        finally:
            gen.stop(clock=self.clock)
        return calibrate.Step.between(rate, t1 - t0, before, after)
