"""A killed run's private Prometheus TSDB (``results/<name>/prometheus-<pid>/``) is removed by
the next run even once its PID belongs to another process (review finding: the directory was
kept while any process had that PID, for good on a host whose PIDs wrap, or in a container
where every run is PID 7)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from autotune import pids, runlock
from autotune.platforms.local import prometheus


def _workdir(base: Path, pid: int, owner: dict[str, object] | None) -> Path:
    path = base / f"prometheus-{pid}"
    (path / "data").mkdir(parents=True)
    if owner is not None:
        (path / prometheus.OWNER).write_text(json.dumps(owner))
    return path


def test_a_dead_runs_directory_goes_even_when_its_pid_is_someone_elses(tmp_path: Path) -> None:
    live = os.getppid()  # a live process that did not make the directory
    reused = _workdir(tmp_path, live, {"pid": live, "start": "1", "pidns":
                                       runlock.pid_namespace()})
    assert prometheus.remove_stale(tmp_path) == [reused]
    assert not reused.exists()


def test_a_live_runs_directory_and_another_namespaces_stay(tmp_path: Path) -> None:
    me = os.getpid()
    mine = _workdir(tmp_path, me, {"pid": me, "start": pids.start_time(me),
                                   "pidns": runlock.pid_namespace()})
    elsewhere = _workdir(tmp_path, 7, {"pid": 7, "start": "1", "pidns": -1})
    assert prometheus.remove_stale(tmp_path) == []
    assert mine.exists() and elsewhere.exists()


def test_without_a_record_the_pid_alone_decides_as_before(tmp_path: Path) -> None:
    p = subprocess.Popen(["true"])
    p.wait()
    dead = _workdir(tmp_path, p.pid, None)
    alive = _workdir(tmp_path, os.getppid(), None)
    (tmp_path / "prometheus-notes").mkdir()  # not ours: no PID in the name
    assert prometheus.remove_stale(tmp_path) == [dead]
    assert alive.exists() and (tmp_path / "prometheus-notes").exists()
