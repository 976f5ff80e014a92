"""Rules for the whole test suite."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Generator
from pathlib import Path
from types import FrameType

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """A suite stopped by SIGTERM (a CI job's timeout, an operator's ``kill``) tears down as
    after Ctrl-C: the test running is interrupted and every fixture's teardown runs. By default
    SIGTERM ends Python at once, running no ``finally``: the control plane's processes (each in
    a session of its own), its pod address on ``lo`` and the throwaway PostgreSQL stayed behind
    (seen 2026-12-05: a kube-apiserver still running after its suite was gone). A second SIGTERM
    during that teardown is ignored rather than cutting it short (SIGKILL still ends it; the
    control plane then dies with it: tests/controlplane/cluster.py)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # A Python handler, not SIG_IGN: an ignored signal is inherited by every program the
    # teardown starts (pg_ctl, ip), a handler is reset at their exec.
    signal.signal(signal.SIGTERM, _tearing_down)
    raise KeyboardInterrupt("SIGTERM")


def _tearing_down(signum: int, frame: FrameType | None) -> None:
    """Already tearing down after a SIGTERM."""


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
        item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, None]:
    """In CI (``CI=true``) a skipped test is a failed one: CI installs every tool the suite
    needs, so a skip there means a fault test (a kill, a SIGTERM to PID 1, a cgroup, the control
    plane) silently did not run, and a green run would prove nothing about it."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _in_ci() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"skipped in CI, where every test must run (CI installs what the "
                           f"tests need): {reason}")


TESTS = Path(__file__).parent
PARALLEL_PACKAGES = frozenset({"unit", "report", "insight", "nightly"})
"""Packages whose tests start no server and measure nothing, unless marked so (below)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks ``serial`` every test that must run alone: one marked ``integration`` or
    ``faults`` (real processes, servers, kills, measurements), and every test outside the
    packages above (the control plane, Prometheus, PostgreSQL). ``make test`` runs the others
    on every core first (pytest-xdist), then these one at a time: a parallel worker's CPU would
    change what they measure and how long their waits take. Derived here, so a test in a new
    package is serial until that package is known to start nothing; a test of these packages
    that aims a signal or needs the kernel's cgroups is marked ``serial`` by hand."""
    for item in items:
        parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
        if (not parts or parts[0] not in PARALLEL_PACKAGES
                or item.get_closest_marker("integration") is not None
                or item.get_closest_marker("faults") is not None):
            item.add_marker(pytest.mark.serial)
