"""A suite that test_stopped_suite.py runs in a pytest of its own and stops with a signal (not
collected by the suite itself: its name does not start with ``test_``).

Its session fixture holds what a Kubernetes suite holds: a process of the test control plane
(``ControlPlane.spawn``; ``sleep`` stands in for etcd, whose start needs the built binaries) and,
with ``AUTOTUNE_STOPPED_SUITE_PG=1``, a throwaway PostgreSQL, whose postmaster ``pg_ctl``
daemonizes (not our child: nothing but the fixture's teardown stops it). Once both run it writes
their PIDs to ``$AUTOTUNE_STOPPED_SUITE`` and its one test waits for the signal."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.controlplane.cluster import ControlPlane
from tests.support.postgres import postgres_server


@pytest.fixture(scope="session")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    plane = ControlPlane(Path("unused"), tmp_path_factory.mktemp("plane"))
    (plane.workdir / "logs").mkdir()
    with ExitStack() as stack:
        stack.callback(plane.stop)
        pids = {"plane": plane.spawn("stand-in", ["sleep", "600"]).proc.pid}
        if os.environ.get("AUTOTUNE_STOPPED_SUITE_PG") == "1":
            pids["postgres"] = stack.enter_context(postgres_server()).pid
        Path(os.environ["AUTOTUNE_STOPPED_SUITE"]).write_text(json.dumps(pids))
        yield


def test_waits_for_the_signal(held: None) -> None:
    signal.pause()
