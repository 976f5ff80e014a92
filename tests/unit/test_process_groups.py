"""Stopping what we started, and only that (``autotune.platforms.local.proc``): real child
processes of this test, in their own sessions."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.chaos.base import Injection
from autotune.clock import FakeClock, SystemClock, wait_until
from autotune.errors import ChaosError, TargetError
from autotune.experiment.models import Stress
from autotune.live import Live
from autotune.pids import start_time
from autotune.platforms.local import proc, stress_ng
from autotune.study.interrupts import Interrupted, signals_as_exceptions


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


def test_stress_ng_that_exits_at_once_says_why(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Review finding: its output went to /dev/null; the trial said only "exited with code 2".
    # Only this stress-ng's words: the log has every earlier injection's too.
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "stress-ng.log").write_text("stress-ng: info: successful run completed\n")
    fake = tmp_path / "stress-ng"
    monkeypatch.setattr(stress_ng, "stress_ng_binary", lambda: str(fake))
    injector = stress_ng.StressNgInjector(proc.Registry(tmp_path / "processes.json"),
                                          FakeClock(), logs)
    live = Live(env={}, since=0.0, scope=(), placement={"cpus": [0]})
    for words, expected in (("stress-ng: unrecognized option '--cpu-load'",
                             "code 2 right after start; it said:\n"
                             "stress-ng: unrecognized option '--cpu-load'$"),
                            ("", "code 2 right after start$")):
        fake.write_text(f"#!/bin/sh\necho \"{words}\"\nexit 2\n" if words
                        else "#!/bin/sh\nexit 2\n")
        fake.chmod(0o755)
        with pytest.raises(ChaosError, match=expected):
            injector.inject(live, Stress(workers=1, load=10), 5.0, {})


def test_a_dead_runs_group_whose_leader_exited_is_stopped_by_the_next_cleanup(
        tmp_path: Path) -> None:
    # Review finding: the cleanup judged a recorded group by its leader alone; a leader gone
    # (a `sudo` or a shell that exited) with its children left dropped the entry and left them.
    ours = proc.start(["sh", "-c", "sleep 63 & echo $! > child; exit 0"], role="service",
                      cwd=tmp_path)
    started = start_time(ours.pid)
    ours.popen.wait()
    child = int((tmp_path / "child").read_text())
    registry = proc.Registry(tmp_path / "processes.json")
    dead_owner = subprocess.Popen(["true"])
    dead_owner.wait()
    registry.add(proc.Entry(ours.pid, started, "service", ("sh", "-c", "..."), dead_owner.pid))
    try:
        done = registry.stop_leftovers(grace=1.0, clock=FakeClock())
        assert done == [f"service (pid {ours.pid}: sh -c ... ...)"]
        assert proc.group_members(ours.pid) == [] and registry.entries() == []
    finally:
        if proc.group_members(ours.pid):
            os.kill(child, signal.SIGKILL)


def test_a_strangers_group_whose_leader_exited_at_a_recorded_number_is_not_stopped(
        tmp_path: Path) -> None:
    # Review finding: once a dead run's group was all gone, a stranger given the number that
    # called setsid(), forked and exited (a daemon) left a group whose leader is gone, which
    # the cleanup took for the dead run's orphans and killed. The kernel giving it the number
    # is played by recording the stranger's number.
    stranger = subprocess.Popen(["sh", "-c", "sleep 61 & echo $! > child; exit 0"],
                                cwd=tmp_path, start_new_session=True)
    stranger.wait()
    child = int((tmp_path / "child").read_text())
    try:
        registry = proc.Registry(tmp_path / "processes.json")
        dead_owner = subprocess.Popen(["true"])
        dead_owner.wait()
        registry.add(proc.Entry(stranger.pid, "12345", "service", ("./svc",), dead_owner.pid,
                                None, mark="0123456789abcdef"))
        [said] = registry.stop_leftovers(grace=1.0, clock=FakeClock())
        assert proc.group_members(stranger.pid) == [child], "the stranger's group was stopped"
        # Said, and kept: a member without the mark may also be ours with a cleared environment
        assert f"not stopped: process group {stranger.pid} has members, none with" in said
        assert [e.pid for e in registry.entries()] == [stranger.pid]
    finally:
        os.kill(child, signal.SIGKILL)
    wait_until(SystemClock(), lambda: proc.group_members(stranger.pid) == [], timeout=10,
               every=0.01)
    assert registry.stop_leftovers(grace=1.0, clock=FakeClock()) == []
    assert registry.entries() == []  # the group gone: forgotten


def test_a_dead_runs_marked_orphans_are_stopped(tmp_path: Path) -> None:
    # ... while the orphans a dead run's group left carry its mark and are stopped.
    registry = proc.Registry(tmp_path / "processes.json")
    ours = proc.start(["sh", "-c", "sleep 62 & echo $! > child; exit 0"], role="service",
                      cwd=tmp_path, registry=registry)
    ours.popen.wait()
    child = int((tmp_path / "child").read_text())
    [entry] = registry.entries()
    environ = Path(f"/proc/{child}/environ")
    # Read once the child's exec is done (the file reads empty while it execs).
    assert entry.mark and wait_until(SystemClock(), lambda: proc.MARK_VAR.encode()
                                     in environ.read_bytes(), timeout=10, every=0.01)
    dead_owner = subprocess.Popen(["true"])
    dead_owner.wait()
    registry._save([proc.Entry(**{**entry.__dict__, "owner": dead_owner.pid})])
    try:
        assert len(registry.stop_leftovers(grace=1.0, clock=FakeClock())) == 1
        assert proc.group_members(ours.pid) == [] and registry.entries() == []
    finally:
        if proc.group_members(ours.pid):
            os.kill(child, signal.SIGKILL)


def test_a_registry_that_cannot_be_written_is_a_clear_error_and_nothing_stays(
        tmp_path: Path) -> None:
    # Review finding: a full disk surfaced as a raw OSError ("internal error: a bug"), and in a
    # stop it skipped what came after (the cgroups' removal). Unwritable is played by a file
    # where the registry's directory should be (root ignores permissions).
    (tmp_path / "results").write_text("not a directory")
    registry = proc.Registry(tmp_path / "results" / "processes.json")
    before = _children()  # other tests' (a server thread's child, a zombie) are not ours
    with pytest.raises(TargetError, match="cannot record the processes autotune started in "):
        proc.start(["sleep", "60"], role="service", registry=registry)
    assert _children() - before == set(), "the process stayed"

    good = proc.Registry(tmp_path / "ok" / "processes.json")
    ours = proc.start(["sleep", "61"], role="service", registry=good)
    good.path = registry.path  # the disk fills up during the run
    proc.stop_all([ours], grace=1.0)  # no error: it is stopped, its entry is stale
    assert not ours.running()


def test_a_signal_while_the_child_starts_leaves_no_process(tmp_path: Path) -> None:
    # Review finding: Popen waits for the child's exec while the child joins the cgroups; an
    # interrupt raised in that wait lost the child (no handle, no registry entry), and in
    # affinity mode a service ran on for good. The join is held here on a FIFO (the child's
    # write to "cgroup.procs" waits for a reader) while SIGTERM arrives.
    procs = tmp_path / "cgroup.procs"
    os.mkfifo(procs)
    registry = proc.Registry(tmp_path / "processes.json")
    me = os.getpid()

    def signal_then_release() -> None:
        wait_until(SystemClock(), lambda: bool(_children() - before), 10.0, 0.01)  # forked
        os.kill(me, signal.SIGTERM)
        with open(procs) as f:  # the child's write goes through: it execs
            f.read()

    before = _children()  # other tests' are not ours
    helper = threading.Thread(target=signal_then_release)
    try:
        with signals_as_exceptions(), pytest.raises(Interrupted):
            helper.start()
            proc.start(["sleep", "62"], role="service", registry=registry,
                       cgroup_procs=[str(procs)])
        helper.join(10)
        assert _children() - before == set(), "the child was left running"
        assert registry.entries() == []
    finally:
        for pid in _children() - before:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def _children() -> set[int]:
    """PIDs of this test process's children (zombies too)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == os.getpid():
                found.add(int(entry.name))
    return found


def test_stress_whose_number_a_stranger_leads_now_is_neither_killed_nor_stuck(
        tmp_path: Path, stranger: subprocess.Popen[bytes]) -> None:
    # Review finding: stop_all rightly left the stranger's group alone, then the injector found
    # its members and ended the study with StressNotRecovered naming them.
    injector = stress_ng.StressNgInjector(proc.Registry(tmp_path / "processes.json"),
                                          FakeClock())
    gone = proc.start(["true"], role="stress-ng")
    gone.popen.wait()
    gone.pid = stranger.pid  # the kernel gave the number to a new group leader
    injector.running["stress-ng-1"] = gone
    assert injector.active() == []
    injector.recover(Injection(id="stress-ng-1", started=0.0, details={}))
    assert stranger.poll() is None
