"""Which cgroups are a dead run's (issue 16, "Concurrency and files"): exactly
``autotune-<name>-<digits>``, never another experiment's; a group made from another PID
namespace is not judged by a PID that means nothing here; and looking (``detect``, as
``autotune cleanup`` and ``doctor`` do) changes nothing in the root's ``subtree_control``."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune import runlock
from autotune.clock import FakeClock
from autotune.platforms.local import cgroups

# Real cgroups and the root's subtree_control, and a host PID that must stay free while a PID
# namespace starts: not beside another test process (tests/conftest.py, serial).
pytestmark = pytest.mark.serial


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _v1_tree(root: Path) -> Path:
    for name, files in {"cpu": ["cpu.cfs_quota_us", "cgroup.procs"],
                        "cpuacct": ["cpuacct.usage", "cgroup.procs"]}.items():
        (root / name).mkdir(parents=True)
        for f in files:
            (root / name / f).write_text("")
    return root


def test_cleaning_api_leaves_the_groups_of_api_canary_alone(tmp_path: Path) -> None:
    root = _v1_tree(tmp_path)
    dead = _dead_pid()
    names = [f"autotune-api-{dead}", f"autotune-api-canary-{dead}", f"autotune-api-2-{dead}",
             "autotune-api-", "autotune-api-x1"]
    for name in names:
        (root / "cpu" / name / "service").mkdir(parents=True)
    stale = cgroups.stale("autotune-api", cgroups.detect(root))
    assert [s.name for s in stale] == [f"autotune-api-{dead}"]
    stale[0].clock = FakeClock()
    stale[0].remove()
    left = sorted(p.name for p in (root / "cpu").iterdir() if p.is_dir())
    assert left == sorted(names[1:])


def test_detect_writes_nothing_and_a_run_undoes_what_it_enabled(tmp_path: Path) -> None:
    """cgroup v2 whose root does not yet enable cpu for its children: ``detect`` (run by
    ``autotune cleanup`` and ``doctor`` too) leaves it so; the run's limit enables it and its
    removal disables it again."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory\n")
    subtree = tmp_path / "cgroup.subtree_control"
    subtree.write_text("memory\n")
    mode = cgroups.detect(tmp_path)
    assert mode.kind == "v2" and mode.cpu_root == tmp_path
    assert subtree.read_text() == "memory\n", "detect() changed the root"
    limit = cgroups.CpuLimit(mode, 1.0, "autotune-t-1", clock=FakeClock())
    (tmp_path / "autotune-t-1").mkdir()
    (tmp_path / "autotune-t-1" / "cgroup.subtree_control").write_text("")
    limit.create()
    assert subtree.read_text() == "+cpu"  # a plain file keeps the last write
    for path in sorted(tmp_path.glob("autotune-t-1/**/*"), key=lambda p: -len(p.parts)):
        if path.is_file():
            path.unlink()  # what a real cgroupfs's rmdir does with the pseudo-files
    limit.remove()
    assert subtree.read_text() == "-cpu"


def test_a_killed_runs_enabled_controllers_are_undone_by_the_next_cleanup(
        tmp_path: Path) -> None:
    """Review finding: a run SIGKILLed after enabling +cpu in the root's subtree_control left
    it enabled for good: the next run's stale-group cleanup removed the group but knew nothing
    of what its maker had enabled. The owner record says it, and the cleanup undoes it."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory\n")
    subtree = tmp_path / "cgroup.subtree_control"
    subtree.write_text("memory\n")
    dead = _dead_pid()
    name = f"autotune-t-{dead}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "cgroup.subtree_control").write_text("")
    killed = cgroups.CpuLimit(cgroups.detect(tmp_path), 1.0, name, clock=FakeClock())
    killed.create()
    assert subtree.read_text() == "+cpu"
    # The run is SIGKILLed here (its process is the dead PID in the group's name... and its
    # owner record names this process, so the record is made to name the dead one).
    record = cgroups._read_owner(tmp_path / name)
    assert record is not None and record["enabled"] == ["cpu"]
    record["pid"], record["start"] = dead, None
    os.setxattr(tmp_path / name, cgroups.OWNER_XATTR, json.dumps(record).encode())
    for path in sorted(tmp_path.glob(f"{name}/**/*"), key=lambda p: -len(p.parts)):
        if path.is_file():
            path.unlink()
    [stale] = cgroups.stale("autotune-t", cgroups.detect(tmp_path))
    stale.clock = FakeClock()
    stale.remove()
    assert not (tmp_path / name).exists()
    assert subtree.read_text() == "-cpu"


def test_the_run_after_a_killed_one_enables_what_its_cleanup_disabled(tmp_path: Path) -> None:
    """Review finding: what the root lacked was read once, by detect(). After a killed run,
    +cpu was still enabled then (the dead run's), so the new run planned to enable nothing;
    its start-up cleanup then removed the dead group and disabled cpu with it, and every
    trial's group failed to be made (the kernel refuses +cpu in a child whose parent does not
    enable it). The root is read when the group is made."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory\n")
    subtree = tmp_path / "cgroup.subtree_control"
    subtree.write_text("cpu memory\n")  # what the killed run left enabled
    dead = _dead_pid()
    name = f"autotune-t-{dead}"
    (tmp_path / name).mkdir()
    os.setxattr(tmp_path / name, cgroups.OWNER_XATTR, json.dumps(
        {"pid": dead, "start": None, "pidns": runlock.pid_namespace(),
         "enabled": ["cpu"]}).encode())
    mode = cgroups.detect(tmp_path)  # the next run starts
    [stale] = cgroups.stale("autotune-t", mode)
    stale.clock = FakeClock()
    stale.remove()
    assert subtree.read_text() == "-cpu"
    subtree.write_text("memory\n")  # what the kernel then shows
    limit = cgroups.CpuLimit(mode, 1.0, "autotune-t-1", clock=FakeClock())
    (tmp_path / "autotune-t-1").mkdir()
    (tmp_path / "autotune-t-1" / "cgroup.subtree_control").write_text("")
    limit.create()
    assert subtree.read_text() == "+cpu" and limit.enabled == ["cpu"]



def _made(root: Path, name: str) -> cgroups.CpuLimit:
    (root / name).mkdir()
    (root / name / "cgroup.subtree_control").write_text("")
    limit = cgroups.CpuLimit(cgroups.detect(root), 1.0, name, clock=FakeClock())
    limit.create()
    return limit


def _removed(root: Path, limit: cgroups.CpuLimit) -> None:
    for path in sorted(root.glob(f"{limit.name}/**/*"), key=lambda p: -len(p.parts)):
        if path.is_file():
            path.unlink()  # what a real cgroupfs's rmdir does with the pseudo-files
    limit.remove()


@pytest.mark.parametrize("first_to_end", ["enabler", "other"])
def test_two_overlapping_runs_leave_the_root_as_they_found_it(tmp_path: Path,
                                                              first_to_end: str) -> None:
    """Review finding: run A enabled +cpu; run B, started meanwhile, found it enabled and
    enabled nothing; A ended first, saw B's group and left cpu enabled; B then had nothing to
    undo, and +cpu stayed in the root for good. A hands it to B's owner record."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory\n")
    subtree = tmp_path / "cgroup.subtree_control"
    subtree.write_text("memory\n")
    a = _made(tmp_path, "autotune-a-1")
    assert subtree.read_text() == "+cpu" and a.enabled == ["cpu"]
    subtree.write_text("cpu memory\n")  # what the kernel then shows
    b = _made(tmp_path, "autotune-b-2")
    assert b.enabled == [] and subtree.read_text() == "cpu memory\n"
    first, last = (a, b) if first_to_end == "enabler" else (b, a)
    _removed(tmp_path, first)
    assert subtree.read_text() == "cpu memory\n", "disabled under a live run"
    _removed(tmp_path, last)
    assert subtree.read_text() == "-cpu"


# --- the real kernel: a run in another PID namespace -------------------------------------------

OWNER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from autotune.platforms.local import cgroups

    name, lock_path = sys.argv[1], sys.argv[2]
    extra = {}
    if lock_path:
        from autotune.runlock import RunLock
        extra["lock"] = RunLock(Path(lock_path))
        extra["lock"].acquire()
    limit = cgroups.CpuLimit(mode=cgroups.detect(), cpus=1.0,
                             name=f"autotune-{name}-{os.getpid()}", **extra)
    limit.create()
    print(limit.name, flush=True)
    sys.stdin.readline()
    limit.remove()
""")


def _kernel() -> cgroups.Mode:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a PID namespace")
    mode = cgroups.detect()
    if mode.kind == "affinity":
        pytest.skip(f"no writable cgroups: {mode.reason}")
    return mode


def _free_pid_here() -> int:
    for pid in range(30000, 20000, -7):
        if not Path(f"/proc/{pid}").exists():
            return pid
    raise AssertionError("no free PID")


@contextlib.contextmanager
def _owner_in_new_pid_namespace(name: str, lock: Path | None,
                                tmp: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A process in a new PID namespace whose PID there is one that no process has here, with
    a limit ``autotune-<name>-<its pid>`` created (and, with ``lock``, holding that lock)."""
    script = tmp / "owner.py"
    script.write_text(OWNER)
    pid = _free_pid_here()
    shell = (f"echo {pid - 1} > /proc/sys/kernel/ns_last_pid; "
             f"{sys.executable} {script} {name} '{lock or ''}'; true")
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", shell],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         start_new_session=True, cwd=Path(__file__).parents[2])
    try:
        assert p.stdout is not None
        group = p.stdout.readline().strip()
        assert group.startswith(f"autotune-{name}-"), group + p.communicate()[0]
        yield p, group
    finally:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        mode = cgroups.detect()
        for root in {mode.cpu_root, mode.acct_root, mode.cpuset_root} - {None}:
            assert root is not None
            for path in sorted(root.glob(f"autotune-{name}-*"), key=lambda x: -len(x.parts)):
                for child in sorted(path.glob("*/"), key=lambda x: -len(x.parts)):
                    with contextlib.suppress(OSError):
                        child.rmdir()
                with contextlib.suppress(OSError):
                    path.rmdir()


def test_a_live_run_in_another_pid_namespace_is_not_stale(tmp_path: Path) -> None:
    mode = _kernel()
    name = f"pidns{os.getpid()}"
    with _owner_in_new_pid_namespace(name, None, tmp_path) as (owner, group):
        pid = int(group.rsplit("-", 1)[1])
        assert not Path(f"/proc/{pid}").exists()  # its PID names no process here
        assert [s.name for s in cgroups.stale(f"autotune-{name}", mode)] == []
        assert owner.stdin is not None
        owner.stdin.write("\n")
        owner.stdin.flush()
        owner.communicate(timeout=30)
    assert not [p for p in mode.cpu_root.glob(f"autotune-{name}-*")]  # type: ignore[union-attr]


def test_a_killed_run_from_another_pid_namespace_is_stale_once_its_lock_is_ours(
        tmp_path: Path) -> None:
    """The run lock is the liveness signal across namespaces: its holder took it before
    making the group, and the kernel released it when it died."""
    from autotune.errors import TargetError
    from autotune.runlock import RunLock

    mode = _kernel()
    name = f"pidnsk{os.getpid()}"
    lock = RunLock(tmp_path / "run.lock")
    with _owner_in_new_pid_namespace(name, tmp_path / "run.lock", tmp_path) as (owner, group):
        with pytest.raises(TargetError):
            lock.acquire()
        assert [s.name for s in cgroups.stale(f"autotune-{name}", mode)] == []
        os.killpg(owner.pid, signal.SIGKILL)
        owner.communicate()
        assert [s.name for s in cgroups.stale(f"autotune-{name}", mode)] == [], \
            "dead, but nothing here proves it yet"
        lock.acquire()  # what the next run of the experiment does first
        try:
            stale = cgroups.stale(f"autotune-{name}", mode)
            assert [s.name for s in stale] == [group]
            stale[0].remove()
        finally:
            lock.release()
    assert not [p for p in mode.cpu_root.glob(f"autotune-{name}-*")]  # type: ignore[union-attr]
