"""Stopping what we started, and only that (``autotune.platforms.local.proc``): real child
processes of this test, in their own sessions."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.clock import FakeClock
from autotune.platforms.local import proc


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A process group that is not ours: a session leader started apart from autotune."""
    p = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield p
    p.kill()
    p.wait()


def test_an_exited_leaders_pid_now_leading_another_group_is_not_signalled(
        tmp_path: Path, stranger: subprocess.Popen[bytes]) -> None:
    # Review finding: a service that exited was reaped by running() (its PID freed); the next
    # stop then sent SIGTERM and SIGKILL to the process group of that number, whoever leads it
    # by then. The kernel giving the number to a new group leader is played by pointing the
    # record at the stranger's PID: the number is all stop_all has.
    registry = proc.Registry(tmp_path / "processes.json")
    ours = proc.start(["true"], role="service", registry=registry)
    ours.popen.wait()
    assert not ours.running()
    ours.pid = stranger.pid
    proc.stop_all([ours], grace=1.0, clock=FakeClock())
    assert stranger.poll() is None, "a stranger's process group was signalled"


def test_an_exited_leaders_children_are_still_stopped(tmp_path: Path) -> None:
    # The other side of the rule: the leader gone, the members it left keep the group's ID
    # reserved, and they are ours to stop.
    registry = proc.Registry(tmp_path / "processes.json")
    ours = proc.start(["sh", "-c", "sleep 60 & echo $! > child; exit 0"], role="service",
                      registry=registry, cwd=tmp_path)
    ours.popen.wait()
    child = int((tmp_path / "child").read_text())
    assert proc.group_members(ours.pid) == [child]
    proc.stop_all([ours], grace=1.0)
    assert proc.group_members(ours.pid) == []
    assert registry.entries() == []


def test_a_group_that_survives_the_kill_stays_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Review finding: what stop_pids reported as still alive (a sudo inside the command, a
    # process stuck in the kernel) was dropped from the registry all the same, so no later
    # cleanup could find it. The kernel's refusal is played by stop_pids' answer.
    registry = proc.Registry(tmp_path / "processes.json")
    ours = proc.start(["sleep", "60"], role="service", registry=registry)
    try:
        monkeypatch.setattr(proc, "stop_pids", lambda pids, *_: list(pids))
        proc.stop_all([ours], grace=0.0)
        assert [e.pid for e in registry.entries()] == [ours.pid]
    finally:
        monkeypatch.undo()
        proc.stop_all([ours], grace=1.0)
    assert registry.entries() == []
