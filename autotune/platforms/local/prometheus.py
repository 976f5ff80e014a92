"""A private Prometheus server for local runs: 127.0.0.1, a free port, a throwaway TSDB under
``results/<name>/prometheus-<pid>/``.

Scrape targets come from a file_sd file we rewrite for every trial, labelled with the trial's
generation, so that a query can never mix series from two configurations.

Prometheus applies a changed target list only on its service-discovery and scrape-manager update
ticks (5 s each, not configurable in 2.x; a ``/-/reload`` does not bypass them), so a target
written when a trial starts is scraped 1-10 s later. The local target therefore *announces* the
next generation's endpoints (fresh ports, so nothing but that generation's processes can answer
there) while the current one runs: the file holds the current targets plus the announced ones,
and when the next trial starts its targets are already being scraped (``up == 0`` until its
processes listen), which makes its first sample arrive within one scrape interval.

An announced target stays in the file until the trial that uses it has started (``set_targets``
names it), even after the next generation is announced: the next announcement is made when a
trial starts, before that trial's targets become current, and a file without them, caught by a
discovery update tick in between, made Prometheus drop them for 5 s, during the warm-up or the
window (CI: "not every endpoint of the service was scraped successfully ... before the window
started").
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import requests

from autotune import files, redaction
from autotune.clock import Clock, SystemClock, wait_until
from autotune.errors import MetricsError, PrerequisiteError
from autotune.platforms.local import ownership, proc
from autotune.platforms.local.ports import free_port

log = logging.getLogger(__name__)

READY_TIMEOUT = 30.0
Group = dict[str, object]
OWNER = "owner.json"
"""In each ``prometheus-<pid>/``: the owner record of the run that made it
(``autotune.platforms.local.ownership``), so that a killed run's TSDB is known as such even once
its PID is someone else's."""


def remove_stale(base: Path) -> list[Path]:
    """Remove the ``prometheus-<pid>/`` directories under ``base`` whose run is gone."""
    removed = []
    for stale in base.glob("prometheus-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and stale.is_dir() and not _maker_alive(stale, int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
            removed.append(stale)
    return removed


def _maker_alive(workdir: Path, pid: int) -> bool:
    try:
        owner = json.loads((workdir / OWNER).read_text())
    except (OSError, ValueError):
        owner = None  # made by an autotune before the record, or the record was lost
    if not isinstance(owner, dict) or not {"pid", "pidns"} <= owner.keys():
        owner = None
    return ownership.alive(owner, pid)


def prometheus_binary() -> str:
    return proc.find_binary("prometheus", "AUTOTUNE_PROMETHEUS", "prometheus")


class EmbeddedPrometheus:
    def __init__(self, scrape_interval: float, registry: proc.Registry | None, logs: Path,
                 cgroup_procs: Sequence[str] = (), clock: Clock | None = None) -> None:
        self.scrape_interval = scrape_interval
        self.registry, self.logs, self.cgroup_procs = registry, logs, list(cgroup_procs)
        self.clock: Clock = clock or SystemClock()
        self.process: proc.Process | None = None
        self.workdir: Path | None = None
        self.url = ""
        self._current: list[Group] = []
        self._announced: list[list[Group]] = []  # oldest first

    @property
    def targets_file(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "targets.json"

    def start(self) -> str:
        if self.process is not None and self.process.running():
            return self.url
        binary = prometheus_binary()
        # Under results/, named by our PID: a killed run's TSDB is found and removed next time.
        base = self.logs.parent.resolve()  # Prometheus resolves file_sd paths from its config
        remove_stale(base)
        self.workdir = base / f"prometheus-{os.getpid()}"
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        (self.workdir / OWNER).write_text(json.dumps(ownership.record()))
        interval = f"{max(1, round(self.scrape_interval * 1000))}ms"
        config = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval,
                       "evaluation_interval": interval},
            "scrape_configs": [{
                "job_name": "autotune",
                "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": "1s"}],
            }],
        }
        (self.workdir / "prometheus.yml").write_text(json.dumps(config))
        self._write_targets()
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        argv = [
            binary,
            f"--config.file={self.workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1d",
            "--log.level=warn",
        ]
        self.process = proc.start(argv, role="prometheus", registry=self.registry,
                                  env=redaction.tool_env(),  # none of autotune's secrets
                                  log_path=self.logs / "prometheus.log",
                                  cgroup_procs=self.cgroup_procs)
        process = self.process

        def ready() -> bool:
            if not process.running():
                raise PrerequisiteError(f"prometheus exited: {process.tail()}")
            try:
                return requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_until(self.clock, ready, READY_TIMEOUT, 0.05, error=lambda _: MetricsError(
            f"prometheus not ready after {READY_TIMEOUT:g}s"))
        return self.url

    @staticmethod
    def _groups(endpoints: Mapping[str, str], labels: Mapping[str, str]) -> list[Group]:
        groups: list[Group] = []
        for job, url in endpoints.items():
            rest = url.split("://", 1)[1]
            hostport, _, path = rest.partition("/")
            groups.append({"targets": [hostport],
                           "labels": {"job": job, "__metrics_path__": "/" + path, **labels}})
        return groups

    def set_targets(self, endpoints: Mapping[str, str], labels: Mapping[str, str]) -> None:
        """Scrape these URLs (job name -> http://host:port/path) with these extra labels,
        instead of the previous ones. Of the announcements, only the newest stays: the older
        ones were for this generation (now current) or for one that never started."""
        self._current = self._groups(endpoints, labels)
        self._announced = self._announced[-1:]
        self._write_targets()

    def announce(self, endpoints: Mapping[str, str], labels: Mapping[str, str]) -> None:
        """Scrape these too from now on, ahead of their use: the next generation's endpoints,
        which nothing answers on until that generation starts. The previous announcement stays
        until ``set_targets`` (its generation is starting, not yet current); the targets stay
        identical when ``set_targets`` later names them, so Prometheus keeps scraping them
        without waiting for an update tick."""
        # Two at most: the generation starting now and the next; an older one never started.
        self._announced = [*self._announced, self._groups(endpoints, labels)][-2:]
        self._write_targets()

    def _write_targets(self) -> None:
        if self.workdir is None:
            return  # written by start()
        groups: list[Group] = []
        for g in [*self._current, *(g for a in self._announced for g in a)]:
            if g not in groups:
                groups.append(g)
        files.replace(self.targets_file, json.dumps(groups))

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
