"""A test suite stopped by a signal leaves nothing of what it started running.

Seen 2026-12-05: a pytest of tests/kubernetes stopped by SIGTERM while its control plane started
left its kube-apiserver running (each part runs in a session of its own, and Python's default
SIGTERM runs no ``finally``). Now SIGTERM tears the suite down as Ctrl-C does (tests/conftest.py)
and each part of the plane dies with the thread that started it (``PR_SET_PDEATHSIG``,
tests/controlplane/cluster.py). The suite here is tests/faults/stopped_suite.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest

from tests.support.waiting import until

REPO = Path(__file__).resolve().parents[2]
SUITE = Path(__file__).with_name("stopped_suite.py")


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has stopped: it only waits to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize(("stop", "postgres"), [
    # SIGTERM (a CI job's timeout, an operator's kill): every fixture's teardown runs, so even
    # the daemonized postmaster is stopped. Without tests/conftest.py's handler both stay.
    (signal.SIGTERM, True),
    # SIGKILL runs nothing of ours: the kernel stops the plane's part (its parent-death signal).
    # A daemonized postmaster cannot be helped here, so none is started.
    (signal.SIGKILL, False),
], ids=["SIGTERM", "SIGKILL"])
def test_a_stopped_suite_leaves_nothing_running(tmp_path: Path, stop: signal.Signals,
                                                postgres: bool) -> None:
    written = tmp_path / "pids"
    log = tmp_path / "suite.log"
    env = {**os.environ, "AUTOTUNE_STOPPED_SUITE": str(written),
           "AUTOTUNE_STOPPED_SUITE_PG": "1" if postgres else "0"}
    with log.open("wb") as out:
        suite = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                  str(SUITE)], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    pids: dict[str, int] = {}
    try:
        pids = until("the suite's fixture holding its processes",
                     lambda: written.exists() and json.loads(written.read_text() or "null"), 90)
        assert all(_running(pid) for pid in pids.values()), pids
        suite.send_signal(stop)
        suite.wait(timeout=60)
        until(f"every process of the suite ({pids}) stopped after its {stop.name}",
              lambda: not any(_running(pid) for pid in pids.values()), 30)
        if stop == signal.SIGTERM:
            assert suite.returncode == pytest.ExitCode.INTERRUPTED, log.read_text()
    finally:
        for pid in [suite.pid, *pids.values()]:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        suite.wait(timeout=10)
